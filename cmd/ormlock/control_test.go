package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/testdb"
)

// dialects runs f on PostgreSQL and MariaDB, each in parallel with the
// other, checking for leaks after.
func dialects(t *testing.T, f func(t *testing.T, k testdb.Kind)) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel() // one server each
			f(t, k)
			testdb.AssertNoLeaks(t, k)
		})
	}
}

// decodeJSON checks that out is ASCII-only JSON of exactly the documented
// struct's fields and decodes it into v.
func decodeJSON(t *testing.T, what, out string, v any) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		if c := out[i]; c >= 0x7f || c == '<' || c == '>' || c == '&' || c < ' ' && c != '\n' {
			t.Fatalf("%s: byte %d is %q, not escaped:\n%s", what, i, c, out)
		}
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v:\n%s", what, err, out)
	}
}

// TestRunsAndHolderJSON: runs --json and holder --json print the JSON
// API's structs, a hostile job name and owner exact and escaped.
func TestRunsAndHolderJSON(t *testing.T) {
	dialects(t, func(t *testing.T, k testdb.Kind) {
		db, table := openLedger(t, k)
		job := uniq(t, "<script>\u202E\x1b[31m")
		slot := time.Now().UTC().Truncate(time.Hour)
		if err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(table), ormlock.WithOwner("o \u202E")); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := runBin(t, k, "runs", "--json", "--ledger-table", table, job)
		want(t, code, stderr, 0)
		var runs apiv1.RunList
		decodeJSON(t, "runs --json", out, &runs)
		if runs.Job != job || len(runs.Runs) != 1 || runs.Runs[0].Job != job || !runs.Runs[0].Slot.Equal(slot) || runs.Runs[0].Status != "done" || runs.Runs[0].DurationMS == nil {
			t.Errorf("runs --json: %+v", runs)
		}
		key := uniq(t, "held")
		held, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- gormlock.Session(db, key, func(context.Context) error { close(held); <-release; return nil }, ormlock.WithOwner("host-<a>"))
		}()
		<-held
		code, out, stderr = runBin(t, k, "holder", "--json", key)
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		want(t, code, stderr, 0)
		var hs apiv1.HolderList
		decodeJSON(t, "holder --json", out, &hs)
		if len(hs.Holders) != 1 || !hs.Holders[0].Held || hs.Holders[0].Key != key || hs.Holders[0].PID == 0 || hs.Holders[0].HeldForMS < 0 {
			t.Errorf("holder --json: %+v", hs)
		}
		code, out, stderr = runBin(t, k, "holder", "--json", key)
		want(t, code, stderr, 0, "is free")
		hs = apiv1.HolderList{}
		decodeJSON(t, "holder --json of a free key", out, &hs)
		if len(hs.Holders) != 1 || hs.Holders[0].Held {
			t.Errorf("holder --json of a free key: %+v", hs)
		}
	})
}

// TestActionVerbs: pause, resume, skip and rerun from the command, each
// recorded in the actions log with its author and reason, the controls
// and the runs showing their effect; refusals exit 2 and change nothing.
func TestActionVerbs(t *testing.T) {
	dialects(t, func(t *testing.T, k testdb.Kind) {
		db, table := openLedger(t, k)
		job := uniq(t, "job <b>")
		lt := []string{"--ledger-table", table}
		act := func(args ...string) apiv1.Action {
			t.Helper()
			code, out, stderr := runBin(t, k, append(append(args, lt...), "--json", "--author", "alice", "--reason", "incident <42>")...)
			want(t, code, stderr, 0)
			var a apiv1.Action
			decodeJSON(t, strings.Join(args, " "), out, &a)
			if a.Author != "alice" || a.Reason != "incident <42>" || a.Job != job || a.Outcome == "" || a.ID == 0 {
				t.Errorf("%q: %+v", args, a)
			}
			return a
		}
		first := act("pause", job)
		if again := act("pause", job); !strings.Contains(again.Outcome, "already") {
			t.Errorf("pause of a paused job: %q", again.Outcome)
		}
		code, out, stderr := runBin(t, k, append([]string{"controls", "--json"}, lt...)...)
		want(t, code, stderr, 0)
		var cs apiv1.ControlList
		decodeJSON(t, "controls --json", out, &cs)
		if len(cs.Controls) != 1 || !cs.Controls[0].Paused || cs.Controls[0].Job != job || cs.Controls[0].Author != "alice" {
			t.Errorf("controls --json: %+v", cs)
		}
		slot := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
		err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return errors.New("ran while paused") }, ormlock.WithLedgerTable(table))
		if !errors.Is(err, ormlock.ErrPaused) {
			t.Errorf("RunOnce of a paused job: %v", err)
		}
		act("resume", job)
		done := slot.Add(-time.Hour)
		if err := gormlock.RunOnce(db, job, done, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(table)); err != nil {
			t.Fatal(err)
		}
		// a done slot cannot be skipped nor rerun
		for _, verb := range []string{"skip", "rerun"} {
			code, _, stderr = runBin(t, k, append([]string{verb, "--author", "a", job, done.Format(time.RFC3339)}, lt...)...)
			want(t, code, stderr, 2, "done")
		}
		skipped := slot.Add(time.Hour)
		if a := act("skip", job, skipped.Format(time.RFC3339)); a.Slot == nil || !a.Slot.Equal(skipped) {
			t.Errorf("skip: slot %v", a.Slot)
		}
		act("rerun", job, slot.Format(time.RFC3339))
		code, out, stderr = runBin(t, k, append([]string{"runs", "--json", job}, lt...)...)
		want(t, code, stderr, 0)
		var runs apiv1.RunList
		decodeJSON(t, "runs --json", out, &runs)
		status := map[time.Time]string{}
		for _, r := range runs.Runs {
			status[r.Slot] = r.Status
		}
		if status[skipped] != "skipped" || status[slot] != "rerun" || status[done] != "done" {
			t.Errorf("runs after the actions: %v", status)
		}
		code, out, stderr = runBin(t, k, append([]string{"actions", "--json", job}, lt...)...)
		want(t, code, stderr, 0)
		var as apiv1.ActionList
		decodeJSON(t, "actions --json", out, &as)
		if len(as.Actions) != 5 || as.Actions[4].ID != first.ID || as.Actions[0].Kind != "rerun" {
			t.Errorf("actions --json: %+v", as)
		}
		// bad input: exit 2, nothing recorded
		for _, c := range [][]string{
			{"skip", job, "yesterday"},
			{"skip", job},
			{"pause", "--author", "", job},
			{"lead", "resign", uniq(t, "nobody-leads")},
		} {
			code, _, stderr = runBin(t, k, append(c, lt...)...)
			want(t, code, stderr, 2)
		}
		code, out, _ = runBin(t, k, append([]string{"actions", "--json", job}, lt...)...)
		as = apiv1.ActionList{}
		decodeJSON(t, "actions --json", out, &as)
		if code != 0 || len(as.Actions) != 5 {
			t.Errorf("refused actions were recorded: %+v", as)
		}
	})
}

// The action verbs' --help: usage and examples on stdout, status 0.
func TestActionVerbsHelp(t *testing.T) {
	for _, args := range [][]string{{"pause", "--help"}, {"resume", "-h"}, {"skip", "--help"}, {"rerun", "--help"}, {"lead", "resign", "--help"}, {"controls", "--help"}, {"actions", "--help"}} {
		code, out, stderr := runBin(t, "", args...)
		want(t, code, stderr, 0)
		if !strings.Contains(out, "Usage: ormlock "+strings.Join(args[:len(args)-1], " ")) || !strings.Contains(out, "Examples") {
			t.Errorf("%q: %s", args, out)
		}
	}
}

// TestLeadResign: ormlock lead resign KEY asks a Lead to step down: its
// fn's ctx ends with a cause wrapping ErrLockLost that says so; the action
// is logged with the key.
func TestLeadResign(t *testing.T) {
	dialects(t, func(t *testing.T, k testdb.Kind) {
		db, table := openLedger(t, k)
		key := uniq(t, "leader")
		ctx, cancel := context.WithCancel(context.Background())
		causes, done := make(chan error, 4), make(chan error, 1)
		go func() {
			done <- gormlock.Lead(db.WithContext(ctx), key, func(ctx context.Context) error {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil
			}, ormlock.WithLedgerTable(table), ormlock.WithKeepalive(time.Second))
		}()
		defer func() {
			cancel()
			<-done
		}()
		deadline := time.Now().Add(30 * time.Second)
		for {
			h, err := gormlock.Holder(db, key)
			if err == nil && h.Held || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		code, out, stderr := runBin(t, k, "lead", "resign", "--json", "--author", "bob", "--reason", "host sick", "--cooldown", "1s", "--ledger-table", table, key)
		want(t, code, stderr, 0)
		var a apiv1.Action
		decodeJSON(t, "lead resign --json", out, &a)
		if a.Kind != "resign" || a.Key != key || a.Author != "bob" {
			t.Errorf("lead resign --json: %+v", a)
		}
		select {
		case cause := <-causes:
			if !errors.Is(cause, ormlock.ErrLockLost) || !strings.Contains(cause.Error(), "resign") {
				t.Errorf("the leader's cause: %v", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the leader was not asked to step down within 30s")
		}
	})
}
