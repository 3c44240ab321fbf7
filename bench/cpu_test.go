package bench_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
	"github.com/ormlock/ormlock/pgxlock"
)

// TestCPUPerCall measures the CPU one call costs the server and the client
// for each lock shape beside the single key, the hand-written protocol and
// a plain transaction: a pool of one connection on loopback, an empty fn,
// every attempt free, ORMLOCK_CPU_CALLS calls (default 3000) of each
// variant per round, ORMLOCK_CPU_ROUNDS rounds (default 5) with the
// variants in an order rotated per round. The server's CPU is the time on
// CPU of the connection's backend (PostgreSQL: /proc/<pg_backend_pid()>/
// schedstat, nanoseconds, user and system together) or of the whole server
// process (MariaDB runs a connection as a thread: the sum over
// /proc/<pid>/task/*/schedstat, background threads included); the client's
// is the test process's user + system time (getrusage). Counts of CPU time,
// not wall time, so that other load on the machine moves them less; each
// ratio is taken within a round (interleaved), and the table gives its
// minimum and median over the rounds, beside each variant's throughput
// over a plain transaction of its stack (wall time). With
// ORMLOCK_CPU_LINK=250us the variants run again through bench's delaying
// proxy (a tenth of the calls), for their throughput over the link
// (docs/BENCHMARKS.md, CPU per call):
//
//	cd bench && ORMLOCK_CPU=1 ORMLOCK_CPU_LINK=250us go test -count=1 -timeout 30m -v -run 'TestCPUPerCall' .
func TestCPUPerCall(t *testing.T) {
	if os.Getenv("ORMLOCK_CPU") == "" {
		t.Skip("a measurement, not a test: run with ORMLOCK_CPU=1 (docs/BENCHMARKS.md, CPU per call)")
	}
	calls, rounds := scaleInt("ORMLOCK_CPU_CALLS", 3000), scaleInt("ORMLOCK_CPU_ROUNDS", 5)
	var out strings.Builder
	fmt.Fprintf(&out, "\nloopback: %d rounds of %d calls per variant; server and client CPU per call (median of the rounds), each ratio min–median over the rounds; \"÷ plain\" is throughput over the plain transaction's (wall time)\n\n", rounds, calls)
	fmt.Fprintf(&out, "| stack | call | server µs | client µs | server ÷ key | client ÷ key | server ÷ hand-written | client ÷ hand-written | ÷ plain |\n|---|---|---|---|---|---|---|---|---|\n")
	var link strings.Builder
	delay, _ := time.ParseDuration(os.Getenv("ORMLOCK_CPU_LINK"))
	linkCalls := max(calls/10, 50)
	if delay > 0 {
		fmt.Fprintf(&link, "\nover the link (%v each way): %d rounds of %d calls per variant; median µs per call, throughput ratios min–median over the rounds\n\n", delay, rounds, linkCalls)
		fmt.Fprintf(&link, "| stack | call | µs per call | ÷ plain | ÷ key | ÷ hand-written |\n|---|---|---|---|---|---|\n")
	}
	for _, st := range []struct {
		name   string
		target string
		k      testdb.Kind
		open   func(t *testing.T, k testdb.Kind, dsn string) ([]cpuVariant, cpuServer)
	}{
		{"pgxlock, PostgreSQL", bench.NamePostgres, testdb.Postgres, pgxCPUVariants},
		{"gormlock, PostgreSQL", bench.NamePostgres, testdb.Postgres, gormCPUVariants},
		{"gormlock, MariaDB", bench.NameMariaDB, testdb.MariaDB, gormCPUVariants},
	} {
		t.Run(st.name, func(t *testing.T) {
			tgt := sqlTarget(st.target, st.k).make(t)
			vs, srv := st.open(t, st.k, tgt.DSN)
			res := measureCPU(t, vs, srv, calls, rounds)
			for _, line := range cpuRows(st.name, vs, res) {
				out.WriteString(line)
			}
			if delay <= 0 {
				return
			}
			links := bench.NewLinks(delay)
			t.Cleanup(func() { _ = links.Close() })
			lt, err := links.Route(tgt)
			if err != nil {
				t.Fatal(err)
			}
			vs, _ = st.open(t, st.k, lt.DSN)
			res = measureCPU(t, vs, func() (time.Duration, error) { return 0, nil }, linkCalls, rounds)
			for _, line := range linkRows(st.name, vs, res) {
				link.WriteString(line)
			}
		})
	}
	out.WriteString(link.String())
	t.Log(out.String())
	if p := os.Getenv("ORMLOCK_CPU_OUT"); p != "" {
		if err := os.WriteFile(p, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// cpuVariant is one call measured: call(i) is its i-th call.
type cpuVariant struct {
	name string
	call func(i int) error
}

// cpuServer reads the server's CPU time so far.
type cpuServer func() (time.Duration, error)

// cpuSample is one round's CPU and wall time per call of one variant.
type cpuSample struct{ server, client, wall float64 }

func measureCPU(t *testing.T, vs []cpuVariant, srv cpuServer, calls, rounds int) [][]cpuSample {
	t.Helper()
	next := make([]int, len(vs))
	run := func(v int, n int) {
		for range n {
			if err := vs[v].call(next[v]); err != nil {
				t.Fatalf("%s: %v", vs[v].name, err)
			}
			next[v]++
		}
	}
	for v := range vs { // warm up: connections, server checks, prepared statements
		run(v, 200)
	}
	res := make([][]cpuSample, len(vs))
	for r := range rounds {
		for j := range vs {
			v := (r + j) % len(vs)
			s0, err := srv()
			if err != nil {
				t.Fatal(err)
			}
			c0, w0 := clientCPU(t), time.Now()
			run(v, calls)
			c1, w1 := clientCPU(t), time.Now()
			s1, err := srv()
			if err != nil {
				t.Fatal(err)
			}
			res[v] = append(res[v], cpuSample{float64(s1-s0) / float64(calls), float64(c1-c0) / float64(calls), float64(w1.Sub(w0)) / float64(calls)})
		}
	}
	return res
}

// cpuStats are the ratios and medians of one stack's samples.
type cpuStats struct {
	vs  []cpuVariant
	res [][]cpuSample
}

func (c cpuStats) idx(name string) int {
	return slices.IndexFunc(c.vs, func(v cpuVariant) bool { return v.name == name })
}

// ratio is f(v) over f(base) per round, as min–median.
func (c cpuStats) ratio(v, base int, f func(cpuSample) float64) string {
	var rs []float64
	for r := range c.res[v] {
		rs = append(rs, f(c.res[v][r])/f(c.res[base][r]))
	}
	slices.Sort(rs)
	return fmt.Sprintf("%.2f–%.2f", rs[0], rs[len(rs)/2])
}

// median is f's median over the rounds, in µs.
func (c cpuStats) median(v int, f func(cpuSample) float64) float64 {
	var xs []float64
	for _, s := range c.res[v] {
		xs = append(xs, f(s))
	}
	slices.Sort(xs)
	return xs[len(xs)/2] / 1e3
}

func sampleServer(s cpuSample) float64 { return s.server }
func sampleClient(s cpuSample) float64 { return s.client }

// sampleSpeed is calls per ns: its ratios are throughput ratios.
func sampleSpeed(s cpuSample) float64 { return 1 / s.wall }
func sampleWall(s cpuSample) float64  { return s.wall }

// cpuRows renders one stack's loopback rows: each variant's median CPU per
// call, its ratios to the single key ("key") and to the hand-written
// protocol ("hand-written"), and its throughput over the plain
// transaction's.
func cpuRows(stack string, vs []cpuVariant, res [][]cpuSample) []string {
	c := cpuStats{vs, res}
	key, hw, plain := c.idx("key"), c.idx("hand-written"), c.idx("plain transaction")
	var rows []string
	for v := range vs {
		rows = append(rows, fmt.Sprintf("| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %s |\n", stack, vs[v].name,
			c.median(v, sampleServer), c.median(v, sampleClient), c.ratio(v, key, sampleServer), c.ratio(v, key, sampleClient),
			c.ratio(v, hw, sampleServer), c.ratio(v, hw, sampleClient), c.ratio(v, plain, sampleSpeed)))
	}
	return rows
}

// linkRows renders one stack's rows over the link: each variant's median
// time per call and its throughput over the plain transaction's, the
// single key's and the hand-written protocol's.
func linkRows(stack string, vs []cpuVariant, res [][]cpuSample) []string {
	c := cpuStats{vs, res}
	key, hw, plain := c.idx("key"), c.idx("hand-written"), c.idx("plain transaction")
	var rows []string
	for v := range vs {
		rows = append(rows, fmt.Sprintf("| %s | %s | %.0f | %s | %s | %s |\n", stack, vs[v].name,
			c.median(v, sampleWall), c.ratio(v, plain, sampleSpeed), c.ratio(v, key, sampleSpeed), c.ratio(v, hw, sampleSpeed)))
	}
	return rows
}

func clientCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedNs is the time on CPU of task (a /proc/<pid>/task/<tid> or
// /proc/<pid> directory), from its schedstat's first field, in ns.
func schedNs(dir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(dir, "schedstat"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s/schedstat: empty", dir)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(n), err
}

// serverProcessCPU reads the time on CPU of every thread of process pid.
func serverProcessCPU(pid int) cpuServer {
	return func() (time.Duration, error) {
		dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
		if err != nil || len(dirs) == 0 {
			return 0, fmt.Errorf("threads of %d: %v", pid, err)
		}
		var sum time.Duration
		for _, d := range dirs {
			if n, err := schedNs(d); err == nil { // a thread may end meanwhile
				sum += n
			}
		}
		return sum, nil
	}
}

// serverOf finds the server side of db's only connection: its backend's
// pid on PostgreSQL, the server process's on MariaDB (@@pid_file).
func serverOf(t *testing.T, k testdb.Kind, db *sql.DB) cpuServer {
	t.Helper()
	if k.Dialect() == "postgres" {
		var pid int
		if err := db.QueryRow("SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		dir := fmt.Sprintf("/proc/%d", pid)
		return func() (time.Duration, error) { return schedNs(dir) }
	}
	var path string
	if err := db.QueryRow("SELECT @@pid_file").Scan(&path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the server's pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return serverProcessCPU(pid)
}

// cpuKeys are the lock shapes measured, from a base name.
func cpuKeys(base string, pg bool) []struct {
	name string
	key  ormlock.Key
	opts []ormlock.Option
} {
	eight := make([]string, 8)
	for i := range eight {
		eight[i] = fmt.Sprintf("%s/all/%d", base, i)
	}
	ks := []struct {
		name string
		key  ormlock.Key
		opts []ormlock.Option
	}{
		{"key", ormlock.Name(base + "/key"), nil},
		{"All of 8, try-once", ormlock.All(eight...), nil},
		{"All of 8, WithWait(2s)", ormlock.All(eight...), []ormlock.Option{ormlock.WithWait(2 * time.Second)}},
		{"Semaphore(10), free", ormlock.Semaphore(base+"/sem", 10), nil},
	}
	if pg {
		ks = append(ks, struct {
			name string
			key  ormlock.Key
			opts []ormlock.Option
		}{"Shared", ormlock.Shared(base + "/shared"), nil})
	}
	return ks
}

// cpuSlot is the i-th slot of RunOnce's variant: a fresh one per call.
func cpuSlot(i int) time.Time { return time.Unix(1_700_000_000+int64(i)*60, 0).UTC() }

func pgxCPUVariants(t *testing.T, k testdb.Kind, dsn string) ([]cpuVariant, cpuServer) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 1, 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgxlock.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	dir := fmt.Sprintf("/proc/%d", pid)
	base := uniq("cpu-pgx")
	fn := func(context.Context, pgx.Tx) error { return nil }
	var vs []cpuVariant
	for _, kk := range cpuKeys(base, true) {
		vs = append(vs, cpuVariant{kk.name, func(int) error { return pgxlock.Transaction(ctx, pool, kk.key, fn, kk.opts...) }})
	}
	job, hw := base+"/runonce", keyhash.Int64(base+"/hw")
	vs = append(vs,
		cpuVariant{"RunOnce, transactional", func(i int) error { return pgxlock.RunOnce(ctx, pool, job, cpuSlot(i), fn) }},
		cpuVariant{"hand-written", func(int) error { return handwrittenPgx(ctx, pool, hw) }},
		cpuVariant{"plain transaction", func(int) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		}},
	)
	return vs, func() (time.Duration, error) { return schedNs(dir) }
}

func gormCPUVariants(t *testing.T, k testdb.Kind, dsn string) ([]cpuVariant, cpuServer) {
	t.Helper()
	ctx := context.Background()
	sdb, err := sql.Open(k.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sdb.Close() })
	sdb.SetMaxOpenConns(1)
	sdb.SetMaxIdleConns(1)
	var dial gorm.Dialector = postgres.New(postgres.Config{Conn: sdb})
	if k.Dialect() != "postgres" {
		dial = mysql.New(mysql.Config{Conn: sdb, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := gormlock.Migrate(db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.AssertNoLeaks(t, k, sdb) })
	srv := serverOf(t, k, sdb)
	base := uniq("cpu-gorm")
	fn := func(*gorm.DB) error { return nil }
	var vs []cpuVariant
	for _, kk := range cpuKeys(base, k.Dialect() == "postgres") {
		vs = append(vs, cpuVariant{kk.name, func(int) error {
			return gormlock.Transaction(db.WithContext(ctx), kk.key, fn, kk.opts...)
		}})
	}
	job, hw := base+"/runonce", base+"/hw"
	vs = append(vs,
		cpuVariant{"RunOnce, transactional", func(i int) error { return gormlock.RunOnce(db.WithContext(ctx), job, cpuSlot(i), fn) }},
		cpuVariant{"hand-written", func(int) error { return testdb.Handwritten(ctx, k, sdb, hw) }},
		cpuVariant{"plain transaction", func(int) error {
			return db.WithContext(ctx).Transaction(func(*gorm.DB) error { return nil })
		}},
	)
	return vs, srv
}
