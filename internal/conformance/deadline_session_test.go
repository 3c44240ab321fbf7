package conformance_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/faults"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The server stops answering while a Session's fn runs, and fn returns when
// the caller's deadline passes: the release cannot be confirmed, and the call
// still returns by the deadline plus grace (not after the release's own
// 15 s bound), with an error matching the deadline. Once the server resumes
// the lock is free and no connection leaked. On PostgreSQL the session's
// backend is frozen; on MariaDB a private server, since freezing it stops
// every connection.
func TestDeadlineFrozenSession(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name+"/postgres", func(t *testing.T) {
			r := openRunner(t, a, testdb.Postgres)
			frozenSession(t, r, "frozen-session-"+t.Name(), func() func() {
				h, err := r.Holder(context.Background(), "frozen-session-"+t.Name())
				if err != nil || !h.Held {
					t.Fatalf("Holder: %+v, %v", h, err)
				}
				return faults.Freeze(t, int(h.PID))
			})
		})
		t.Run(a.name+"/mariadb", func(t *testing.T) {
			srv := testdb.Start(t, testdb.MariaDB)
			db, err := sql.Open("mysql", srv.DSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.AssertNoLeaks(t, db); _ = db.Close() })
			r := a.on(t, "mysql", db)
			frozenSession(t, r, "frozen-session-"+t.Name(), func() func() { return faults.Freeze(t, srv.PID()) })
		})
	}
}

// frozenSession holds key in a Session, calls freeze in fn, and checks the
// call's timing and error, then that the lock is free once resumed.
func frozenSession(t *testing.T, r runner, key string, freeze func() (resume func())) {
	t.Helper()
	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var resume func()
	var thaw *time.Timer
	start := time.Now()
	// a keepalive longer than the test: the release, not a failed check,
	// meets the frozen server
	err := r.Session(ctx, key, func(ctx context.Context) error {
		resume = freeze()
		// should the release not be bounded, the server thaws in time for
		// the call to return and the test to fail rather than hang
		thaw = time.AfterFunc(deadline+grace+5*time.Second, resume)
		<-ctx.Done()
		return ctx.Err()
	}, ormlock.WithKeepalive(time.Minute))
	faults.Within(t, "Session", start, deadline+grace)
	if thaw != nil {
		thaw.Stop()
	}
	if resume != nil {
		resume()
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ormlock.ErrNotAcquired) {
		t.Fatalf("Session: %v, want DeadlineExceeded after the lock was taken", err)
	}
	for until := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		h, herr := r.Holder(context.Background(), key)
		if herr == nil && !h.Held {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("the lock is still held after the server resumed: %+v, %v", h, herr)
		}
	}
}

// The caller's context ends while fn goes on working past the release's
// grace; on a healthy server the release still succeeds: the grace counts
// from the release, not from the end of the context.
func TestSessionReleaseLongAfterCancel(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter, k testdb.Kind) {
		r := openRunner(t, a, k)
		key := "release-after-cancel-" + t.Name()
		ctx, cancel := context.WithCancel(context.Background())
		err := r.Session(ctx, key, func(context.Context) error {
			cancel()
			time.Sleep(1500 * time.Millisecond) // longer than the grace
			return nil
		})
		if err != nil {
			t.Fatalf("Session: %v, want nil (fn succeeded and the lock was released)", err)
		}
		if h, err := r.Holder(context.Background(), key); err != nil || h.Held {
			t.Fatalf("after the Session: %+v, %v", h, err)
		}
	})
}
