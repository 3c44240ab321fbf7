package ormlock_test

import (
	"testing"

	"github.com/ormlock/ormlock"
)

// The owner is printed once: on PostgreSQL it is the application_name,
// shown as application=; on MySQL/MariaDB as owner=.
func TestHolderInfoStringOwner(t *testing.T) {
	for _, c := range []struct {
		h    ormlock.HolderInfo
		want string
	}{
		{ormlock.HolderInfo{Held: true, Dialect: "postgres", PID: 1, Application: "replica-a", Owner: "replica-a"},
			"held pid=1 application=replica-a waiters=0"},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 7, Owner: "replica b"},
			`held pid=7 owner="replica b" waiters=0`},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
