package lockproto

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Every shape of the lock message runs on the server, directly and behind
// PgBouncer, and its reply parses as the layout says: the builder and the
// parser agree with each other and with PostgreSQL.
func TestPgLockMessageOnServer(t *testing.T) {
	ctx := context.Background()
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			db := testdb.Open(t, k)
			other := testdb.Open(t, k)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db, other) })
			key := keys.Postgres(keys.Name(t.Name()), "")
			for _, c := range []struct {
				begin       string
				wait        time.Duration
				long, probe bool
			}{
				{"BEGIN ISOLATION LEVEL READ COMMITTED", 0, false, false},
				{"BEGIN", 0, false, true},
				{"BEGIN READ ONLY", time.Second, false, false},
				{"BEGIN ISOLATION LEVEL READ COMMITTED", 0, true, false},
				{"BEGIN ISOLATION LEVEL READ COMMITTED", time.Second, true, true},
			} {
				msg := pgLockMessage(c.begin, key, c.wait, c.long, c.probe)
				l := lockLayout{wait: c.wait > 0, long: c.long, iso: c.begin == "BEGIN" || c.begin == "BEGIN READ ONLY", pid: c.probe}
				// free: taken
				rep := runLockMessage(ctx, t, db, msg, l, nil)
				if !rep.ok || rep.level != sql.LevelDefault || (c.probe && rep.pid == 0) {
					t.Fatalf("%s: reply %+v", msg, rep)
				}
				// held by another transaction: not taken (the try), or
				// lock_timeout (the wait)
				holder, err := other.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := PGTryXact(ctx, holder, key, nil, nil); err != nil || !ok {
					t.Fatalf("holder: %v %v", ok, err)
				}
				var sqlErr error
				rep = runLockMessage(ctx, t, db, msg, l, &sqlErr)
				_ = holder.Rollback()
				if c.wait > 0 {
					if SQLState(sqlErr) != sqlStateLockNotAvailable {
						t.Fatalf("%s while held: %+v, %v; want lock_timeout (55P03)", msg, rep, sqlErr)
					}
				} else if sqlErr != nil || rep.ok {
					t.Fatalf("%s while held: %+v, %v; want not taken", msg, rep, sqlErr)
				}
			}
		})
	}
}

// runLockMessage sends msg on a connection of db and reads its reply, then
// ends the transaction it began. A reply error fails the test unless
// replyErr is given, which then receives it.
func runLockMessage(ctx context.Context, t *testing.T, db *sql.DB, msg string, l lockLayout, replyErr *error) lockReply {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var rep lockReply
	err = withPgConn(conn, func(pc *pgconn.PgConn) error {
		var rerr error
		rep, rerr = readLockReply(pc.Exec(ctx, msg), l)
		if replyErr != nil {
			*replyErr = rerr
		} else if rerr != nil {
			return rerr
		}
		_, err := pc.Exec(ctx, "ROLLBACK").ReadAll()
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	return rep
}
