package lockproto

import (
	"testing"
	"time"
)

// A holder's lock time: from its keepalive's comment, from state_change
// while its last statement is the lock's own, else from its transaction's
// start.
func TestPGHeldSince(t *testing.T) {
	xact := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	change := xact.Add(5 * time.Second)
	for _, c := range []struct {
		state, query string
		want         time.Time
	}{
		{"idle in transaction", pgKeepaliveSQL(3200 * time.Millisecond), xact.Add(3200 * time.Millisecond)},
		{"active", pgKeepaliveSQL(0), xact},
		{"idle in transaction", "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock((-42)::int8) IS NOT NULL", change},
		{"idle in transaction", pgOwnerSQL("host-a/42"), change},
		{"active", "SELECT pg_advisory_xact_lock(1)", xact}, // still waiting or working
		{"idle in transaction", "SELECT 1", xact},           // not ormlock's keepalive
		{"idle in transaction", "UPDATE t SET v = 1", xact},
	} {
		got, ok := pgHeldSince(c.state, c.query, xact, change)
		if !ok || !got.Equal(c.want) {
			t.Errorf("%s %q: %v %v, want %v", c.state, c.query, got, ok, c.want)
		}
	}
	if _, ok := pgHeldSince("idle", "SELECT 1", time.Time{}, change); ok {
		t.Error("outside a transaction: told")
	}
}
