package main_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// pgBouncerDefaultModeDSN is the PgBouncer DSN without its
// default_query_exec_mode: pgx's default, cache_statement, which names
// prepared statements that a transaction-mode PgBouncer before 1.21 hands
// to whichever server connection the next transaction gets.
func pgBouncerDefaultModeDSN(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testdb.DSN(t, testdb.PgBouncer))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("default_query_exec_mode")
	u.RawQuery = q.Encode()
	return u.String()
}

// Behind PgBouncer 1.18 in transaction mode with a DSN that names no
// default_query_exec_mode, concurrent runs all work: the command then uses
// an exec mode that keeps no prepared statement past one message. A DSN
// that asks for the cache itself gets it, and the error of a clash names
// the cause and the fix.
func TestPgBouncerDefaultExecMode(t *testing.T) {
	dsn := pgBouncerDefaultModeDSN(t)
	ledger := testdb.Table(t, testdb.PgBouncer, "pool")
	if code, _, stderr := runBin(t, "", "migrate", "--dsn", dsn, "--ledger-table", ledger); code != 0 {
		t.Fatalf("migrate: exit status %d; stderr:\n%s", code, stderr)
	}
	const n = 6
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = start(t, "", "run", "--dsn", dsn, "--wait", "30s", uniq(t, fmt.Sprint(i%2)), "--", "true")
	}
	for i, p := range procs {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Errorf("run %d: exit status %d; stderr:\n%s", i, code, p.stderr)
		}
	}
	for _, args := range [][]string{
		{"holder", "--dsn", dsn, uniq(t, "h")},
		{"run", "--dsn", dsn, "--ledger-table", ledger, "--once-per", "@daily", uniq(t, "once"), "--", "true"},
		{"runs", "--dsn", dsn, "--ledger-table", ledger, uniq(t, "once")},
		{"lead", "--dsn", dsn, uniq(t, "lead"), "--", "true"},
	} {
		code, _, stderr := runBin(t, "", args...)
		if code != 0 {
			t.Errorf("%q: exit status %d; stderr:\n%s", args[0], code, stderr)
		}
	}

	// Asked for, the statement cache clashes sooner or later; the error
	// says why and what to set.
	cached := dsn + "&default_query_exec_mode=cache_statement"
	if !strings.Contains(dsn, "?") {
		cached = dsn + "?default_query_exec_mode=cache_statement"
	}
	var failed []string
	for round := 0; round < 5 && len(failed) == 0; round++ {
		procs := make([]*proc, n)
		for i := range procs {
			procs[i] = start(t, "", "run", "--dsn", cached, "--wait", "30s", uniq(t, fmt.Sprint(i%2)), "--", "true")
		}
		for _, p := range procs {
			if p.wait(t, time.Minute) != 0 {
				failed = append(failed, p.stderr.String())
			}
		}
	}
	if len(failed) == 0 {
		t.Fatal("no clash of prepared statements in 5 rounds with cache_statement")
	}
	for _, stderr := range failed {
		if !strings.Contains(stderr, "42P05") && !strings.Contains(stderr, "26000") {
			t.Errorf("a run with cache_statement failed otherwise:\n%s", stderr)
			continue
		}
		for _, s := range []string{"PgBouncer", "default_query_exec_mode=simple_protocol", "exec"} {
			if !strings.Contains(stderr, s) {
				t.Errorf("the error does not say %q:\n%s", s, stderr)
			}
		}
	}
	testdb.AssertNoLeaks(t, testdb.PgBouncer)
}
