package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// soakFlag selects the long versions of the tests (more kill rounds, a
// longer soak and restart runs): go test ./chaos/ -args -soak, or
// ORMLOCK_SOAK=1 (make chaos).
var soakFlag = flag.Bool("soak", false, "run the long versions of the chaos tests (also ORMLOCK_SOAK=1)")

func soak() bool { return *soakFlag || os.Getenv("ORMLOCK_SOAK") != "" }

// soakOps is the long soak's operations per server: ORMLOCK_SOAK_OPS, or
// 100,000.
func soakOps() int {
	if n, err := strconv.Atoi(os.Getenv("ORMLOCK_SOAK_OPS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// pick returns short in the default run and long under -soak.
func pick[T any](short, long T) T {
	if soak() {
		return long
	}
	return short
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run runs the tests, stops the servers (testdb.Main), and then checks that
// nothing the tests started is still running: no goroutine of a pool, a
// driver, a keepalive or a server process waiter.
func run(m *testing.M) int {
	code := testdb.Main(m)
	if code != 0 {
		return code
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: goroutines left after the tests and the servers stopped:\n%v\n", err)
		return 1
	}
	return 0
}

// openGorm opens a new pool on the shared server of kind k, wrapped in GORM
// without touching the server, and checks after the test that nothing
// leaked: no advisory or named lock, no connection in use.
func openGorm(t testing.TB, k testdb.Kind) (*gorm.DB, *sql.DB) {
	t.Helper()
	return gormtest.Open(t, k, gormtest.NoPing())
}

// openDSN opens a pool on dsn for a server of kind k, wrapped in GORM; the
// pool is closed at cleanup. The caller registers its leak check.
func openDSN(t testing.TB, k testdb.Kind, dsn string) (*gorm.DB, *sql.DB) {
	t.Helper()
	sqlDB, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	return gormtest.On(t, k.Dialect(), sqlDB, gormtest.NoPing()), sqlDB
}

// lockName is how a test names a lock: its key and namespace.
type lockName struct {
	key ormlock.Key
	ns  string
}

func named(name string) lockName { return lockName{key: ormlock.Name(name)} }

// pgTag returns the pg_locks classid and objid of a bigint advisory key.
func pgTag(k int64) (classid, objid int64) {
	u := uint64(k)
	return int64(u >> 32), int64(u & 0xffffffff)
}

// holderConn returns the server connection holding the lock l, as seen
// through admin (a superuser pool straight to the server that runs the SQL):
// the backend pid on PostgreSQL, the connection id on MariaDB. ok is false
// when nobody holds it.
func holderConn(ctx context.Context, dialect string, admin *sql.DB, l lockName) (id int64, ok bool, err error) {
	if dialect == "postgres" {
		c, o := pgTag(keys.Postgres(keys.Key(l.key), l.ns).Int64)
		err = admin.QueryRowContext(ctx, `SELECT pid FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid::int8 = $1 AND objid::int8 = $2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, c, o).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return id, err == nil, err
	}
	var n sql.NullInt64
	err = admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", keys.MySQL(keys.Key(l.key), l.ns)).Scan(&n)
	return n.Int64, err == nil && n.Valid, err
}

// waitHolder waits up to 30s for somebody to hold l and returns its
// connection id.
func waitHolder(t testing.TB, dialect string, admin *sql.DB, l lockName) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, ok, err := holderConn(context.Background(), dialect, admin, l)
		if err != nil {
			t.Fatalf("find the holder of %v: %v", l.key, err)
		}
		if ok {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody holds %v after 30s", l.key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockFree reports whether hand-written SQL through admin can take the lock
// l right now; it releases it at once.
func lockFree(ctx context.Context, dialect string, admin *sql.DB, l lockName) (bool, error) {
	var ok bool
	if dialect == "postgres" {
		tx, err := admin.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer tx.Rollback()
		pk := keys.Postgres(keys.Key(l.key), l.ns)
		if pk.IsPair {
			err = tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1::int4, $2::int4)", pk.ClassID, pk.ObjID).Scan(&ok)
		} else {
			err = tx.QueryRowContext(ctx, "SELECT pg_try_advisory_xact_lock($1::int8)", pk.Int64).Scan(&ok)
		}
		return ok, err
	}
	conn, err := admin.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	name := keys.MySQL(keys.Key(l.key), l.ns)
	var res sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&res); err != nil {
		return false, err
	}
	if res.Int64 != 1 {
		return false, nil
	}
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&res); err != nil || res.Int64 != 1 {
		return false, fmt.Errorf("release %q: %v (result %v)", name, err, res)
	}
	return true, nil
}

// mustFree fails the test unless l is free (polling up to 10s: a server
// frees a dead connection's locks asynchronously).
func mustFree(t testing.TB, dialect string, admin *sql.DB, l lockName) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := lockFree(context.Background(), dialect, admin, l)
		if err != nil {
			t.Fatalf("check lock %v: %v", l.key, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock %v still held after 10s", l.key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mustHeld fails the test if l is free right now.
func mustHeld(t testing.TB, dialect string, admin *sql.DB, l lockName) {
	t.Helper()
	ok, err := lockFree(context.Background(), dialect, admin, l)
	if err != nil {
		t.Fatalf("check lock %v: %v", l.key, err)
	}
	if ok {
		t.Fatalf("lock %v is free, want it held", l.key)
	}
}

// workTable creates a scratch table (slot, who) through exec and drops it
// after the test through drop.
func workTable(t testing.TB, exec, drop *sql.DB) string {
	t.Helper()
	name := testdb.TableName(t, "w")
	_, _ = exec.Exec("DROP TABLE IF EXISTS " + name)
	if _, err := exec.Exec("CREATE TABLE " + name + " (slot VARCHAR(64) NOT NULL, who VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = drop.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// ledgerTable creates the test's own RunOnce ledger with gormlock.Migrate and
// drops it after the test through drop.
func ledgerTable(t testing.TB, db *gorm.DB, drop *sql.DB) string {
	t.Helper()
	name := testdb.TableName(t, "l")
	_, _ = drop.Exec("DROP TABLE IF EXISTS " + name)
	if err := gormlock.Migrate(db, ormlock.WithLedgerTable(name)); err != nil {
		t.Fatalf("Migrate(%s): %v", name, err)
	}
	t.Cleanup(func() { _, _ = drop.Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// countRows counts the rows of table through q, optionally filtered by a
// condition with ? placeholders (PostgreSQL's are rewritten).
func countRows(t testing.TB, dialect string, q *sql.DB, table, where string, args ...any) int {
	t.Helper()
	query := "SELECT COUNT(*) FROM " + table
	if where != "" {
		query += " WHERE " + where
	}
	if dialect == "postgres" {
		query = dollar(query)
	}
	var n int
	if err := q.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// dollar rewrites ? placeholders as $1, $2, ...
func dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// overlaps tracks the calls inside fn for one key. Two calls can be inside
// fn together without a broken lock: a holder whose server connection died
// (a server restart, or the driver closing the connection because the
// caller's context ended during one of fn's statements) stays inside fn
// until it notices, while the server has already freed its lock for the
// next caller. What must hold is that the call that entered first has lost
// its lock and fails: a Transaction cannot commit on a dead connection, and a
// Session reports ErrLockLost. It records each such group and every call's
// result and description.
type overlaps struct {
	mu      sync.Mutex
	inside  []int // call ids, in order of entry
	groups  [][]int
	results map[int]error
	about   map[int]string
}

func (o *overlaps) enter(id int) (leave func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inside = append(o.inside, id)
	if len(o.inside) > 1 {
		o.groups = append(o.groups, slices.Clone(o.inside))
	}
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.inside = slices.DeleteFunc(o.inside, func(x int) bool { return x == id })
	}
}

// done records the result of call id and what it was.
func (o *overlaps) done(id int, err error, about ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.results == nil {
		o.results, o.about = map[int]error{}, map[int]string{}
	}
	o.results[id] = err
	o.about[id] = strings.Join(about, " ")
}

// check reports every group in which a call other than the last to enter
// does not satisfy lost (its call must show that it lost the lock), and logs
// the groups that do.
func (o *overlaps) check(t *testing.T, what string, lost func(err error) bool) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, g := range o.groups {
		last := g[len(g)-1]
		for _, id := range g[:len(g)-1] {
			err := o.results[id]
			if !lost(err) {
				t.Errorf("%s: call %d (%s) was inside fn when call %d (%s) entered, and returned %v; want it to have lost its lock",
					what, id, o.about[id], last, o.about[last], err)
			} else {
				t.Logf("%s: call %d (%s) still inside fn, its lock lost, when call %d (%s) entered; it returned %v",
					what, id, o.about[id], last, o.about[last], err)
			}
		}
	}
}

// count returns the number of groups seen.
func (o *overlaps) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.groups)
}

// stats summarises measured durations for the report.
type stats []time.Duration

func (s stats) String() string {
	if len(s) == 0 {
		return "no samples"
	}
	c := slices.Clone(s)
	slices.Sort(c)
	r := func(d time.Duration) time.Duration {
		if d < 10*time.Millisecond {
			return d.Round(10 * time.Microsecond)
		}
		return d.Round(time.Millisecond)
	}
	return fmt.Sprintf("n=%d min=%v median=%v max=%v", len(c), r(c[0]), r(c[len(c)/2]), r(c[len(c)-1]))
}
