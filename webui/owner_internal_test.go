package webui

import (
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

// TestHolderOwner: the locks table shows a holder's owner as
// HolderInfo.String and ormlock holder do, one way on every server: the
// Owner column always, Application only when it says something else (on
// PostgreSQL the owner is the application_name: shown once).
func TestHolderOwner(t *testing.T) {
	for _, c := range []struct {
		name       string
		hi         ormlock.HolderInfo
		owner, app string
	}{
		{"postgres", ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 1, Application: "replica-a", Owner: "replica-a"}, "replica-a", ""},
		{"mysql", ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 7, Owner: "replica b"}, "replica b", ""},
		{"mysql, none recorded", ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 8}, "", ""},
		{"different", ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 3, Application: "a", Owner: "b"}, "b", "a"},
	} {
		r := holderOf(ormlock.Name("k"), c.hi, time.Now(), time.UTC)
		if r.Owner != c.owner || r.Application != c.app {
			t.Errorf("%s: Owner %q, Application %q; want %q, %q", c.name, r.Owner, r.Application, c.owner, c.app)
		}
	}
}

// TestHolderLease: a lease's row in the locks table names its mechanism,
// epoch and time left, and no pid; an advisory lock's names its mechanism
// only.
func TestHolderLease(t *testing.T) {
	r := holderOf(ormlock.Name("k"), ormlock.HolderInfo{Held: true, Dialect: "mysql", Mechanism: "lease", Epoch: 42, ExpiresIn: 21300 * time.Millisecond, Owner: "replica-a", Mode: "exclusive"}, time.Now(), time.UTC)
	if r.Mechanism != "lease" || r.Epoch != "42" || r.ExpiresIn == "" || r.PID != 0 || r.Owner != "replica-a" {
		t.Errorf("lease row %+v", r)
	}
	r = holderOf(ormlock.Name("k"), ormlock.HolderInfo{Held: true, Dialect: "postgres", Mechanism: "advisory", PID: 7}, time.Now(), time.UTC)
	if r.Mechanism != "advisory" || r.Epoch != "" || r.ExpiresIn != "" || r.PID != 7 {
		t.Errorf("advisory row %+v", r)
	}
}
