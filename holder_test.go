package ormlock_test

import (
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

// HolderInfo's lookups against real servers are tested in gormlock
// (holder_test.go); this covers its text form.
func TestHolderInfoString(t *testing.T) {
	for _, c := range []struct {
		h    ormlock.HolderInfo
		want string
	}{
		{ormlock.HolderInfo{Dialect: "postgres"}, "free"},
		{ormlock.HolderInfo{Dialect: "postgres", Waiters: 2}, "free waiters=2"},
		{ormlock.HolderInfo{
			Held: true, Dialect: "postgres", PID: 4242, User: "app", Application: "billing worker",
			ClientAddr: "10.0.0.7:51234", Database: "app", Mode: "ExclusiveLock", State: "idle in transaction",
			StateFor: 1200 * time.Millisecond, HeldFor: 1300*time.Millisecond + 400*time.Microsecond,
			Waiters: 1, Query: `SELECT "x"`,
		}, `held pid=4242 user=app application="billing worker" client=10.0.0.7:51234 database=app mode=ExclusiveLock state="idle in transaction" state_for=1.2s held_for=1.3s waiters=1 query="SELECT \"x\""`},
		{ormlock.HolderInfo{Held: true, Dialect: "mysql", PID: 7, User: "root", ClientAddr: "127.0.0.1:40000", State: "Sleep", StateFor: 3 * time.Second},
			"held pid=7 user=root client=127.0.0.1:40000 state=Sleep state_for=3s waiters=0"},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
