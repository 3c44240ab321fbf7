package lockproto

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
)

// Table tests of the pure parts of the PostgreSQL lock message: the BEGIN
// it starts with, the query strings, and the parser of the lock's row.

func TestPgBegin(t *testing.T) {
	for _, c := range []struct {
		opts *sql.TxOptions
		want string
		ok   bool
	}{
		{nil, "BEGIN", true},
		{&sql.TxOptions{}, "BEGIN", true},
		{&sql.TxOptions{ReadOnly: true}, "BEGIN READ ONLY", true},
		{&sql.TxOptions{Isolation: sql.LevelReadUncommitted}, "BEGIN ISOLATION LEVEL READ UNCOMMITTED", true},
		{&sql.TxOptions{Isolation: sql.LevelReadCommitted}, "BEGIN ISOLATION LEVEL READ COMMITTED", true},
		{&sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: true}, "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY", true},
		// levels that take their snapshot once, and the ones pgx refuses,
		// take another path
		{&sql.TxOptions{Isolation: sql.LevelRepeatableRead}, "", false},
		{&sql.TxOptions{Isolation: sql.LevelSerializable}, "", false},
		{&sql.TxOptions{Isolation: sql.LevelSnapshot}, "", false},
		{&sql.TxOptions{Isolation: sql.LevelLinearizable}, "", false},
	} {
		got, ok := pgBegin(c.opts)
		if got != c.want || ok != c.ok {
			t.Errorf("pgBegin(%+v) = %q, %v; want %q, %v", c.opts, got, ok, c.want, c.ok)
		}
	}
}

func TestPgLockMessage(t *testing.T) {
	id := keys.PostgresKey{Int64: -42}
	pair := keys.PostgresKey{IsPair: true, ClassID: -2147483648, ObjID: 2147483647}
	const rc = "BEGIN ISOLATION LEVEL READ COMMITTED"
	const waitPre = "; SELECT set_config('ormlock.lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', '"
	const waitPost = ") IS NOT NULL, set_config('lock_timeout', current_setting('ormlock.lock_timeout'), true)"
	for _, c := range []struct {
		name        string
		begin       string
		k           keys.PostgresKey
		wait        time.Duration
		long, probe bool
		want        string
	}{
		{"try, level named", rc, id, 0, false, false,
			rc + "; SELECT pg_try_advisory_xact_lock((-42)::int8)"},
		{"try, pair", rc, pair, 0, false, false,
			rc + "; SELECT pg_try_advisory_xact_lock((-2147483648)::int4, (2147483647)::int4)"},
		{"try, server's default level", "BEGIN", id, 0, false, false,
			"BEGIN; SELECT pg_try_advisory_xact_lock((-42)::int8), current_setting('transaction_isolation')"},
		{"try, read only: still no level", "BEGIN READ ONLY", id, 0, false, false,
			"BEGIN READ ONLY; SELECT pg_try_advisory_xact_lock((-42)::int8), current_setting('transaction_isolation')"},
		{"try, probe", "BEGIN", id, 0, false, true,
			"BEGIN; SELECT pg_try_advisory_xact_lock((-42)::int8), current_setting('transaction_isolation'), pg_backend_pid()"},
		{"wait", rc, id, 1500 * time.Millisecond, false, false,
			rc + waitPre + "1500ms', true); SELECT pg_advisory_xact_lock((-42)::int8" + waitPost},
		{"wait under a millisecond is one", rc, pair, time.Microsecond, false, false,
			rc + waitPre + "1ms', true); SELECT pg_advisory_xact_lock((-2147483648)::int4, (2147483647)::int4" + waitPost},
		{"wait over lock_timeout's maximum is cut to it", rc, id, 1000 * time.Hour, false, false,
			rc + waitPre + "2147483647ms', true); SELECT pg_advisory_xact_lock((-42)::int8" + waitPost},
		{"session", rc, id, 0, true, false,
			rc + "; " + pgKeepTransaction + "; SELECT pg_try_advisory_xact_lock((-42)::int8), (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')"},
		{"session, wait, probe", rc, id, 2 * time.Second, true, true,
			rc + "; " + pgKeepTransaction + waitPre + "2000ms', true); SELECT pg_advisory_xact_lock((-42)::int8" + waitPost +
				", (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'), pg_backend_pid()"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := pgLockMessage(c.begin, c.k, false, c.wait, c.long, c.probe); got != c.want {
				t.Errorf("pgLockMessage:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestPgTryMessage(t *testing.T) {
	id := keys.PostgresKey{Int64: -9223372036854775808}
	pair := keys.PostgresKey{IsPair: true, ClassID: 7, ObjID: -8}
	for _, c := range []struct {
		name    string
		begin   string
		k       keys.PostgresKey
		prepare bool
		mark    int64
		want    string
	}{
		{"execute", "BEGIN", id, false, 99,
			"BEGIN; EXECUTE ormlock_pg_try_advisory_xact_lock_int8(-9223372036854775808)"},
		{"execute, pair", "BEGIN READ ONLY", pair, false, 99,
			"BEGIN READ ONLY; EXECUTE ormlock_pg_try_advisory_xact_lock_int4(7, -8)"},
		{"prepare with the mark, then execute", "BEGIN", id, true, 99,
			"BEGIN; PREPARE ormlock_pg_try_advisory_xact_lock_int8(int8) AS SELECT pg_try_advisory_xact_lock($1), current_setting('transaction_isolation'), 99::int8" +
				"; EXECUTE ormlock_pg_try_advisory_xact_lock_int8(-9223372036854775808)"},
		{"prepare, pair", "BEGIN", pair, true, 4611686018427387904,
			"BEGIN; PREPARE ormlock_pg_try_advisory_xact_lock_int4(int4, int4) AS SELECT pg_try_advisory_xact_lock($1, $2), current_setting('transaction_isolation'), 4611686018427387904::int8" +
				"; EXECUTE ormlock_pg_try_advisory_xact_lock_int4(7, -8)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := pgTryMessage(c.begin, c.k, c.prepare, c.mark); got != c.want {
				t.Errorf("pgTryMessage:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestSnapshotLevel(t *testing.T) {
	for setting, want := range map[string]sql.IsolationLevel{
		"repeatable read":  sql.LevelRepeatableRead,
		"serializable":     sql.LevelSerializable,
		"read committed":   sql.LevelDefault,
		"read uncommitted": sql.LevelDefault,
		"":                 sql.LevelDefault,
	} {
		got, once := snapshotLevel(setting)
		if got != want || once != (want != sql.LevelDefault) {
			t.Errorf("snapshotLevel(%q) = %v, %v", setting, got, once)
		}
	}
}

func TestParseLockRow(t *testing.T) {
	row := func(cols ...string) [][]byte {
		r := make([][]byte, len(cols))
		for i, c := range cols {
			if c != "NULL" {
				r[i] = []byte(c)
			}
		}
		return r
	}
	for _, c := range []struct {
		name    string
		row     [][]byte
		l       lockLayout
		want    lockReply
		wantErr string
	}{
		{"taken", row("t"), lockLayout{}, lockReply{ok: true}, ""},
		{"held elsewhere", row("f"), lockLayout{}, lockReply{}, ""},
		{"extra columns are ignored", row("t", "x"), lockLayout{}, lockReply{ok: true}, ""},
		{"wait: granted, lock_timeout restored", row("t", "0"), lockLayout{wait: true}, lockReply{ok: true}, ""},
		{"wait: not granted cannot be", row("f", "0"), lockLayout{wait: true}, lockReply{}, "unexpected result of pg_advisory_xact_lock"},
		{"session idle timeout", row("t", "60000"), lockLayout{long: true}, lockReply{ok: true, idle: time.Minute}, ""},
		{"session idle timeout NULL", row("t", "NULL"), lockLayout{long: true}, lockReply{ok: true}, ""},
		{"session idle timeout not a number", row("t", "1min"), lockLayout{long: true}, lockReply{}, "idle_in_transaction_session_timeout"},
		{"isolation takes its snapshot once", row("t", "repeatable read"), lockLayout{iso: true}, lockReply{ok: true, level: sql.LevelRepeatableRead}, ""},
		{"isolation read committed", row("f", "read committed"), lockLayout{iso: true}, lockReply{}, ""},
		{"pid", row("t", "4242"), lockLayout{pid: true}, lockReply{ok: true, pid: 4242}, ""},
		{"pid over 32 bits", row("t", "4294967296"), lockLayout{pid: true}, lockReply{}, "pg_backend_pid()"},
		{"pid negative", row("t", "-1"), lockLayout{pid: true}, lockReply{}, "pg_backend_pid()"},
		{"prepared statement's mark", row("t", "serializable", "77"), lockLayout{iso: true, mark: true}, lockReply{ok: true, level: sql.LevelSerializable, mark: 77}, ""},
		{"mark not a number", row("t", "read committed", "x"), lockLayout{iso: true, mark: true}, lockReply{}, "mark"},
		{"every column, in order", row("t", "0", "1500", "serializable", "9"), lockLayout{wait: true, long: true, iso: true, pid: true},
			lockReply{ok: true, idle: 1500 * time.Millisecond, level: sql.LevelSerializable, pid: 9}, ""},
		{"too few columns", row("t", "read committed"), lockLayout{iso: true, pid: true}, lockReply{}, "2 columns"},
		{"no columns", row(), lockLayout{}, lockReply{}, "0 columns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseLockRow(c.row, c.l)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("parseLockRow: %+v, %v; want an error with %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("parseLockRow = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

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
				msg := pgLockMessage(c.begin, key, false, c.wait, c.long, c.probe)
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
	err = withWire(conn, func(w PgWire) error {
		var rerr error
		rep, rerr = readLockReply(w.Exec(ctx, msg), l)
		if replyErr != nil {
			*replyErr = rerr
		} else if rerr != nil {
			return rerr
		}
		return w.Exec(ctx, "ROLLBACK").Close()
	})
	if err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	return rep
}
