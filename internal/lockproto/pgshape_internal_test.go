package lockproto

import (
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
)

// The one statement of a shape in the message with BEGIN (pgshape.go):
// its CASE, in canonical order or slot order, its layout, and the
// columns that follow it.
func TestPgShapeMessage(t *testing.T) {
	set, err := newTarget(Postgres, keys.All(keys.ID(3), keys.ID(1), keys.Shared(keys.ID(2))), "")
	if err != nil {
		t.Fatal(err)
	}
	msg, l := pgShapeMessage("BEGIN", set, 0, false, true)
	want := "BEGIN; SELECT CASE WHEN NOT pg_try_advisory_xact_lock((1)::int8) THEN false" +
		" WHEN NOT pg_try_advisory_xact_lock_shared((2)::int8) THEN false" +
		" WHEN NOT pg_try_advisory_xact_lock((3)::int8) THEN false ELSE true END, current_setting('transaction_isolation')"
	if msg != want || l != (lockLayout{iso: true}) {
		t.Errorf("All, try-once:\n%s\nwant\n%s (layout %+v)", msg, want, l)
	}
	msg, _ = pgShapeMessage("BEGIN", set, 1500*time.Millisecond, true, false)
	for _, part := range []string{
		"BEGIN; " + pgKeepTransaction + "; SELECT set_config('ormlock.lock_timeout', current_setting('lock_timeout'), true)",
		"set_config('lock_timeout', '1500ms', true), set_config('statement_timeout', '1500ms', true); SELECT CASE WHEN pg_advisory_xact_lock((1)::int8) IS NULL THEN NULL",
		"ELSE set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true) IS NOT NULL AND set_config('statement_timeout', current_setting('ormlock.statement_timeout'), true) IS NOT NULL END, (SELECT setting::int8",
	} {
		if !strings.Contains(msg, part) {
			t.Errorf("All, wait: %s\nlacks %s", msg, part)
		}
	}
	sem, err := newTarget(Postgres, keys.Semaphore(keys.ID(7), 2), "")
	if err != nil {
		t.Fatal(err)
	}
	msg, l = pgShapeMessage("BEGIN", sem, time.Second, false, false)
	s1, s2 := keys.Postgres(keys.SlotKey(keys.ID(7), 1), ""), keys.Postgres(keys.SlotKey(keys.ID(7), 2), "")
	var b strings.Builder
	b.WriteString("BEGIN; SELECT CASE WHEN pg_try_advisory_xact_lock(")
	pgKeyArgs(&b, s1)
	b.WriteString(") THEN 1 WHEN pg_try_advisory_xact_lock(")
	pgKeyArgs(&b, s2)
	b.WriteString(") THEN 2 ELSE 0 END")
	if msg != b.String() || !l.slot {
		t.Errorf("Semaphore:\n%s\nwant\n%s (layout %+v)", msg, b.String(), l)
	}
	for row, want := range map[string]lockReply{"0": {}, "2": {ok: true, slot: 2}} {
		got, err := parseLockRow([][]byte{[]byte(row)}, lockLayout{slot: true})
		if err != nil || got != want {
			t.Errorf("slot row %q: %+v %v, want %+v", row, got, err, want)
		}
	}
}

// The statement after the lock (pgthen.go): the refused try raises, the
// tag's count is read, and the refusals are told from errors.
func TestPgThen(t *testing.T) {
	o, err := NewOp(Postgres, "RunOnce", keys.ID(5), config.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o.SetThen("INSERT INTO t VALUES (1)")
	if !o.sendsThen(forFn) || o.sendsThen(forSession) || o.sendsThen(forSplit) {
		t.Error("the statement goes with fn's transaction only")
	}
	msg, l := pgThenMessage(o, "BEGIN", 0, true)
	want := "BEGIN; SELECT CASE WHEN pg_try_advisory_xact_lock((5)::int8) THEN true ELSE current_setting('ormlock.lock_not_acquired')::bool END, " +
		"current_setting('transaction_isolation'); INSERT INTO t VALUES (1)"
	if msg != want || !l.then || !l.iso {
		t.Errorf("%s\nwant\n%s (%+v)", msg, want, l)
	}
	if msg, _ := pgThenMessage(o, "BEGIN", time.Second, false); !strings.HasSuffix(msg, "; INSERT INTO t VALUES (1)") || !strings.Contains(msg, "pg_advisory_xact_lock((5)::int8)") {
		t.Errorf("wait: %s", msg)
	}
	for tag, n := range map[string]int64{"INSERT 0 1": 1, "INSERT 0 0": 0, "UPDATE 3": 3, "BEGIN": -1} {
		if got := tagRows(tag); got != n {
			t.Errorf("tagRows(%q) = %d, want %d", tag, got, n)
		}
	}
	refused := sqlErr{"42704", `unrecognized configuration parameter "ormlock.lock_not_acquired"`}
	if !lockRefused(refused, false) || lockRefused(sqlErr{"42704", "other"}, false) || lockRefused(refused, true) {
		t.Error("the try's raise")
	}
	// a statement timeout is not a clean refusal: failed keeps the
	// server's error with ErrNotAcquired
	if !lockRefused(sqlErr{"55P03", "lock timeout"}, true) || lockRefused(sqlErr{"57014", "canceling statement due to statement timeout"}, true) {
		t.Error("the wait's timeouts")
	}
	if _, ran, _ := o.ThenRows(); ran {
		t.Error("ran before any message")
	}
}

type sqlErr struct{ state, msg string }

func (e sqlErr) Error() string    { return "ERROR: " + e.msg + " (SQLSTATE " + e.state + ")" }
func (e sqlErr) SQLState() string { return e.state }
