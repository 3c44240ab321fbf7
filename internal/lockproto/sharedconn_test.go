package lockproto_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/leakcheck"
)

// A shared lock connection's keepalive interval is the shortest of its
// holders' own: it shrinks when a holder with a shorter one joins and
// grows back when that holder leaves, beyond the opener's once the opener
// left (on MySQL/MariaDB up to what the wait_timeout it raised allows: the
// opener's interval, or 6 s).
func TestSharedConnInterval(t *testing.T) {
	leakcheck.Goroutines(t)
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		if k == testdb.PgBouncer {
			t.Skip("no shared lock connections behind a transaction-mode pooler")
		}
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		want := func(what string, d time.Duration) {
			t.Helper()
			if got := lockproto.SharedIntervals(db); !slices.Equal(got, []time.Duration{d}) {
				t.Fatalf("%s: intervals %v, want [%v]", what, got, d)
			}
		}
		// hold runs a shared Session on name with keepalive every until the
		// returned function is called, which waits for its return.
		hold := func(name string, every time.Duration) func() {
			t.Helper()
			held, quit, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			op := newOp(t, k, keys.Name(t.Name()+"-"+name), ormlock.WithSharedLockConns(1), ormlock.WithKeepalive(every))
			go func() {
				done <- op.Session(context.Background(), db, func(context.Context) error {
					close(held)
					<-quit
					return nil
				})
			}()
			select {
			case <-held:
			case err := <-done:
				t.Fatalf("Session %s: %v", name, err)
			}
			return func() {
				close(quit)
				if err := <-done; err != nil {
					t.Errorf("Session %s: %v", name, err)
				}
			}
		}
		const long, short = 15 * time.Second, 200 * time.Millisecond
		endA := hold("a", long)
		want("the opener alone", long)
		endB := hold("b", short)
		want("a shorter holder joined", short)
		endB()
		want("the shorter holder left", long)

		endC := hold("c", short)
		want("a shorter holder joined again", short)
		endA()
		want("the opener left", short)
		endD := hold("d", long)
		want("a longer holder joined", short)
		endC()
		want("the shorter holder left", long)
		endD()
		if got := lockproto.SharedIntervals(db); len(got) != 0 {
			t.Fatalf("connections left after the last Session: %v", got)
		}

		// a connection opened with a short interval
		endE := hold("e", short)
		endF := hold("f", long)
		want("a longer holder joined", short)
		endE()
		if k.Dialect() == "mysql" {
			want("the shorter opener left (MySQL: its wait_timeout bounds the interval)", 6*time.Second)
		} else {
			want("the shorter opener left", long)
		}
		endF()
		if got := lockproto.SharedIntervals(db); len(got) != 0 {
			t.Fatalf("connections left after the last Session: %v", got)
		}
	})
}
