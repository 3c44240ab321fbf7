package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// ormlock run with several KEYs (all or none), --shared and --max-holders.
func TestRunShapes(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		a, b := uniq(t, "a"), uniq(t, "b")
		// several KEYs: every one held while COMMAND runs; the environment
		// names them
		code, out, stderr := runBin(t, k, "run", a, b, "--", "sh", "-c", `printf '%s|%s' "$ORMLOCK_KEY" "$ORMLOCK_KEYS"`)
		want(t, code, stderr, 0)
		if out != a+"\n"+b+"|2" {
			t.Errorf("ORMLOCK_KEY|ORMLOCK_KEYS = %q", out)
		}
		g, waitFor := gate(t)
		p := start(t, k, "run", b, a, "--", "sh", "-c", "echo started; "+waitFor)
		p.waitOutput(t, "started", time.Minute)
		if testdb.RawFree(t, k, "", a) || testdb.RawFree(t, k, "", b) {
			t.Error("a KEY is free while COMMAND runs")
		}
		// a run of an overlapping set is refused, taking nothing
		c := uniq(t, "c")
		code, _, stderr = runBin(t, k, "run", c, a, "--", "echo", "ran")
		want(t, code, stderr, 75, "lock not acquired")
		if !testdb.RawFree(t, k, "", c) {
			t.Error("a refused set left a key held")
		}
		letGo(t, g)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 0)

		// --max-holders 2: two runs hold, the third is refused
		sem := uniq(t, "sem")
		g2, waitFor2 := gate(t)
		r1 := start(t, k, "run", "--max-holders", "2", sem, "--", "sh", "-c", "echo started; "+waitFor2)
		r2 := start(t, k, "run", "--max-holders", "2", sem, "--", "sh", "-c", "echo started; "+waitFor2)
		r1.waitOutput(t, "started", time.Minute)
		r2.waitOutput(t, "started", time.Minute)
		code, _, stderr = runBin(t, k, "run", "--max-holders", "2", sem, "--", "echo", "ran")
		want(t, code, stderr, 75, "lock not acquired")
		// holder --max-holders lists both slots' holders; without it the
		// semaphore's own name is not a held lock
		code, out, stderr = runBin(t, k, "holder", "--max-holders", "2", sem)
		want(t, code, stderr, 0)
		if n := strings.Count(out, "held "); n != 2 || !strings.Contains(out, "slot=1") || !strings.Contains(out, "slot=2") {
			t.Errorf("holder --max-holders 2 while two runs hold: %d held lines, want 2 with slot=1 and slot=2:\n%s", n, out)
		}
		letGo(t, g2)
		want(t, r1.wait(t, time.Minute), r1.stderr.String(), 0)
		want(t, r2.wait(t, time.Minute), r2.stderr.String(), 0)

		// --shared
		sh := uniq(t, "shared")
		code, out, stderr = runBin(t, k, "run", "--shared", sh, "--", "echo", "ran")
		if k.Dialect() == "mysql" {
			want(t, code, stderr, 70, "no shared named lock")
			if out != "" {
				t.Errorf("COMMAND ran: %q", out)
			}
		} else {
			want(t, code, stderr, 0)
		}
	})
}

func TestRunShapeUsage(t *testing.T) {
	k := testdb.Postgres
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "--max-holders", "2", "a", "b", "--", "true"}, "--max-holders takes one KEY"},
		{[]string{"run", "--max-holders", "0", "a", "--", "true"}, "--max-holders must be 1-128, got 0"},
		{[]string{"run", "--max-holders=-1", "a", "--", "true"}, "--max-holders must be 1-128, got -1"},
		{[]string{"run", "--max-holders", "129", "a", "--", "true"}, "--max-holders must be 1-128, got 129"},
		{[]string{"run", "--shared", "--max-holders", "2", "a", "--", "true"}, "do not combine"},
		{[]string{"holder", "--max-holders", "129", "a"}, "--max-holders must be 1-128, got 129"},
		{[]string{"run", "--once-per", "1h", "a", "b", "--", "true"}, "--once-per takes one KEY"},
		{[]string{"run", "--once-per", "1h", "--shared", "a", "--", "true"}, "do not combine with it"},
		{[]string{"run", "a", "a", "--", "true"}, "one server lock"},
		{[]string{"lead", "a", "b", "--", "true"}, "one KEY before --"},
	} {
		code, out, stderr := runBin(t, k, c.args...)
		want(t, code, stderr, 2, c.msg)
		if out != "" || strings.Contains(stderr, "ran") {
			t.Errorf("%q: COMMAND ran", c.args)
		}
	}
}
