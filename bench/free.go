package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ormlock/ormlock/keyhash"
)

// The lock for free: every adapter against the plain transaction of its own
// stack and against the protocol written by hand, measured side by side in
// interleaved steps (see [MeasureFreeCell]), with the best a locked
// transaction can do at the same load (the floor) beside each cell. The
// measured table is in docs/BENCHMARKS.md (The lock for free, per adapter,
// over the link).

// Short names of the contenders of the lock-for-free table, and of the two
// halves of the floor (raw pgx connections, no pool, no ORM).
const (
	FreeHandwritten    = "hand-written"     // database/sql, hand-written
	FreeGormlock       = "gormlock"         // gormlock.Transaction
	FreeGormTx         = "gorm-tx"          // GORM db.Transaction, empty fn
	FreeEntlock        = "entlock"          // entlock.Transaction
	FreeEntTx          = "ent-tx"           // ent client.Tx, Commit
	FreeSQLlock        = "sqllock"          // sqllock.Transaction
	FreeSQLTx          = "sql-tx"           // database/sql BeginTx, Commit
	FreePgxlock        = "pgxlock"          // pgxlock.Transaction
	FreePgxTx          = "pgx-tx"           // pgx pool.Begin, Commit
	FreePgxHandwritten = "pgx-hand-written" // pgx, hand-written
	FreeFloorBare      = "floor-bare"       // raw pgx: begin; commit
	FreeFloorLock      = "floor-lock"       // raw pgx: BEGIN; SELECT pg_try_advisory_xact_lock(k); commit
)

// freeContenders maps the short names to the contenders they run.
var freeContenders = map[string]string{
	FreeHandwritten: CHandwritten, FreeGormlock: CGormTransaction, FreeGormTx: CGormNoLock,
	FreeEntlock: CEntTransaction, FreeEntTx: CEntNoLock, FreeSQLlock: CSQLTransaction,
	FreeSQLTx: CSQLNoLock, FreePgxlock: CPgxTransaction, FreePgxTx: CPgxNoLock,
	FreePgxHandwritten: CPgxHandwritten,
}

// freeNames returns the contenders of a cell on dialect d, in the order of
// a step rotation: on PostgreSQL every adapter, its plain transaction, both
// hand-written protocols and the floor's two halves; on MySQL/MariaDB the
// adapters and the hand-written protocol (the goal row there).
func freeNames(d Dialect) []string {
	if d == MySQL {
		return []string{FreeHandwritten, FreeGormlock, FreeEntlock, FreeSQLlock}
	}
	return []string{FreeHandwritten, FreeGormlock, FreeGormTx, FreeEntlock, FreeEntTx,
		FreeSQLlock, FreeSQLTx, FreePgxlock, FreePgxTx, FreePgxHandwritten, FreeFloorBare, FreeFloorLock}
}

// FreeRatio is one row of the table: Contender's throughput over Base's
// (the inverse ratio of their median steps; above 1, Contender is faster).
type FreeRatio struct {
	// Label is the row's text.
	Label string
	// Contender and Base are short names (FreeGormlock, FreeGormTx, ...).
	Contender, Base string
	// Plain marks a ratio over the plain transaction of Contender's stack,
	// whose goal yields to the floor when the floor is below it.
	Plain bool
	// GoalPostgres and GoalMySQL are the goals on each dialect; 0 is none,
	// and a row with neither goal nor Base on a dialect is not shown there.
	GoalPostgres, GoalMySQL float64
	// NoGoal explains a missing goal.
	NoGoal string
}

// Key names the ratio in metrics and in [FreeCell.Ratios]: "gormlock÷gorm-tx".
func (q FreeRatio) Key() string { return q.Contender + "÷" + q.Base }

func (q FreeRatio) on(d Dialect) bool {
	return d == Postgres || (d == MySQL && q.GoalMySQL > 0)
}

// FreeRatios are the rows of the table, in order: each adapter over its
// plain transaction, then over its hand-written protocol.
var FreeRatios = []FreeRatio{
	{Label: "pgxlock.Transaction vs `pool.Begin`/`Commit`", Contender: FreePgxlock, Base: FreePgxTx, Plain: true, GoalPostgres: 0.95},
	{Label: "gormlock.Transaction vs `db.Transaction`", Contender: FreeGormlock, Base: FreeGormTx, Plain: true, GoalPostgres: 0.95},
	{Label: "entlock.Transaction vs `client.Tx`/`Commit`", Contender: FreeEntlock, Base: FreeEntTx, Plain: true, GoalPostgres: 0.95},
	{Label: "sqllock.Transaction vs `db.BeginTx`/`Commit`", Contender: FreeSQLlock, Base: FreeSQLTx, Plain: true,
		NoGoal: "none: database/sql's BEGIN is a round trip of its own (3 against 2)"},
	{Label: "pgxlock.Transaction vs pgx hand-written", Contender: FreePgxlock, Base: FreePgxHandwritten, GoalPostgres: 1.35},
	{Label: "gormlock.Transaction vs database/sql hand-written", Contender: FreeGormlock, Base: FreeHandwritten, GoalPostgres: 1.35, GoalMySQL: 0.95},
	{Label: "entlock.Transaction vs database/sql hand-written", Contender: FreeEntlock, Base: FreeHandwritten, GoalPostgres: 1.35, GoalMySQL: 0.95},
	{Label: "sqllock.Transaction vs database/sql hand-written", Contender: FreeSQLlock, Base: FreeHandwritten, GoalPostgres: 0.95, GoalMySQL: 0.95},
}

// FreeOptions tune [Free] and [MeasureFreeCell].
type FreeOptions struct {
	// Workers are the goroutine counts of the cells. The default is 1 and 8.
	Workers []int
	// Rounds is the number of rounds of a cell; each gives one ratio of
	// every row. The default is 12.
	Rounds int
	// Steps is the number of iterations of a round; an iteration runs one
	// step of every contender, in an order rotated per iteration. The
	// default is 40.
	Steps int
	// Warmup is the number of unmeasured steps of each contender before the
	// first round (pools filled, statements prepared). The default is 10.
	Warmup int
	// AllocCalls is the number of calls the allocations per call are
	// averaged over. The default is 300.
	AllocCalls int
	// Prefix starts every lock key. The default is "free-" and the start
	// time.
	Prefix string
	// Loop, when set, replaces Rounds: iterations run while it returns true
	// (as testing.B.Loop), grouped into rounds of Steps; a last shorter
	// round counts too.
	Loop func() bool
	// Progress receives one line per cell; nil means none.
	Progress io.Writer
}

func (o FreeOptions) withDefaults() FreeOptions {
	if len(o.Workers) == 0 {
		o.Workers = []int{1, 8}
	}
	positive(&o.Rounds, 12)
	positive(&o.Steps, 40)
	positive(&o.Warmup, 10)
	positive(&o.AllocCalls, 300)
	if o.Prefix == "" {
		o.Prefix = keyPrefix("free")
	}
	return o
}

// Spread is the median of per-round values with their range.
type Spread struct {
	Median, Min, Max float64
	// N is the number of rounds; 0 means not measured.
	N int
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// FreeCell is one cell of the table: one target, one goroutine count.
type FreeCell struct {
	Target  Target
	Workers int
	// Names are the contenders, in rotation order.
	Names []string
	// P50 is each contender's median step over all rounds.
	P50 map[string]time.Duration
	// Ratios are the per-round ratios of the rows of [FreeRatios], by
	// [FreeRatio.Key].
	Ratios map[string]Spread
	// Floor is bare ÷ locked on raw pgx connections (PostgreSQL only): the
	// best a locked transaction can do against a plain one at this load.
	Floor Spread
	// Load1Before and Load1After are the 1-minute load averages at the
	// start and the end of the measured rounds.
	Load1Before, Load1After float64
	// CPUBusy is the busy fraction of all CPUs over the measured rounds
	// (/proc/stat), -1 when unknown.
	CPUBusy float64
	// Rounds is the number of rounds measured.
	Rounds int
	// Took is the measured time (warm-up excluded).
	Took time.Duration
}

// floorStep runs one raw-pgx transaction of the floor on conn.
func floorStep(conn *pgx.Conn, first string, wantLock bool) Attempt {
	return func(ctx context.Context) (bool, error) {
		res, err := conn.PgConn().Exec(ctx, first).ReadAll()
		if err != nil {
			return false, err
		}
		if wantLock && (len(res) != 2 || len(res[1].Rows) != 1 || string(res[1].Rows[0][0]) != "t") {
			_, _ = conn.PgConn().Exec(ctx, "rollback").ReadAll()
			return false, nil
		}
		if _, err := conn.PgConn().Exec(ctx, "commit").ReadAll(); err != nil {
			return false, err
		}
		return true, nil
	}
}

// MeasureFreeCell measures one cell on t with workers goroutines. Every
// contender is opened on its own pool of workers+1 connections (the floor:
// workers raw pgx connections). A step of a contender is one attempt by
// each goroutine at once, each on its own free key, with an empty critical
// section, and lasts until the last one ends; an iteration is one step of
// each contender, in an order rotated per iteration, so that a burst of
// other load hits all of them alike. A round is opts.Steps iterations; it
// gives each contender's median step and from them one value of every
// ratio. The cell's ratios are the medians of the per-round ratios, with
// their range.
func MeasureFreeCell(ctx context.Context, t Target, workers int, opts FreeOptions) (cell *FreeCell, err error) {
	opts = opts.withDefaults()
	if t.Dialect != Postgres && t.Dialect != MySQL {
		return nil, fmt.Errorf("bench: no lock-for-free cell on %s", t.Name)
	}
	// The attempts run on a context that never ends, as in [Run]: a
	// cancellable one makes the drivers watch it and, on MySQL/MariaDB,
	// costs entlock and sqllock a round trip (the bounded COMMIT); ctx
	// itself is checked between iterations.
	actx := context.WithoutCancel(ctx)
	names := freeNames(t.Dialect)
	var closers []func() error
	defer func() {
		for _, c := range slices.Backward(closers) {
			err = errors.Join(err, c())
		}
	}()
	byName := map[string]Contender{}
	for _, c := range Contenders() {
		byName[c.Name] = c
	}
	attempts := make([][]Attempt, len(names))
	var floorConns []*pgx.Conn
	for i, n := range names {
		if n == FreeFloorBare || n == FreeFloorLock {
			if floorConns == nil {
				for range workers {
					conn, err := pgx.Connect(actx, t.DSN)
					if err != nil {
						return nil, fmt.Errorf("bench: floor connection to %s: %w", t.Name, err)
					}
					closers = append(closers, func() error { return conn.Close(actx) })
					floorConns = append(floorConns, conn)
				}
			}
			for w, conn := range floorConns {
				first := "begin"
				if n == FreeFloorLock {
					first = fmt.Sprintf("BEGIN; SELECT pg_try_advisory_xact_lock(%d)",
						keyhash.Int64(fmt.Sprintf("%s-%s-%d-floor-%d", opts.Prefix, t.Name, workers, w)))
				}
				attempts[i] = append(attempts[i], floorStep(conn, first, n == FreeFloorLock))
			}
			continue
		}
		c := byName[freeContenders[n]]
		in, err := c.Open(ctx, t, workers+1)
		if err != nil {
			return nil, fmt.Errorf("bench: open %s on %s: %w", c.Name, t.Name, err)
		}
		closers = append(closers, in.Close)
		for w := range workers {
			attempts[i] = append(attempts[i], in.Bind(fmt.Sprintf("%s-%s-%d-%s-%d", opts.Prefix, t.Name, workers, n, w), func() {}))
		}
	}

	step, stop := Stepper(actx, names, attempts, workers)
	defer stop()
	for i := range names {
		for range opts.Warmup {
			if _, err := step(i); err != nil {
				return nil, fmt.Errorf("bench: %s on %s, warm-up: %w", names[i], t.Name, err)
			}
		}
	}

	cell = &FreeCell{Target: t, Workers: workers, Names: names, P50: map[string]time.Duration{}, Ratios: map[string]Spread{}}
	var (
		all     = make([][]time.Duration, len(names))
		round   = make([][]time.Duration, len(names))
		perRow  = map[string][]float64{}
		floor   []float64
		iter    int
		inRound int
	)
	closeRound := func() {
		med := map[string]float64{}
		for i, n := range names {
			slices.Sort(round[i])
			med[n] = float64(round[i][len(round[i])/2])
			all[i] = append(all[i], round[i]...)
			round[i] = round[i][:0]
		}
		for _, q := range FreeRatios {
			if c, b := med[q.Contender], med[q.Base]; c > 0 && b > 0 && q.on(t.Dialect) {
				perRow[q.Key()] = append(perRow[q.Key()], b/c)
			}
		}
		if l, b := med[FreeFloorLock], med[FreeFloorBare]; l > 0 && b > 0 {
			floor = append(floor, b/l)
		}
		inRound = 0
		cell.Rounds++
	}
	cell.Load1Before = LoadAvg1()
	cpu0 := ReadCPUTimes()
	t0 := time.Now()
	more := opts.Loop
	if more == nil {
		left := opts.Rounds * opts.Steps
		more = func() bool { left--; return left >= 0 }
	}
	for more() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for j := range names {
			i := (j + iter) % len(names)
			d, err := step(i)
			if err != nil {
				return nil, fmt.Errorf("bench: %s on %s: %w", names[i], t.Name, err)
			}
			round[i] = append(round[i], d)
		}
		iter++
		if inRound++; inRound == opts.Steps {
			closeRound()
		}
	}
	if inRound > 0 {
		closeRound()
	}
	cell.Took = time.Since(t0)
	cell.CPUBusy = ReadCPUTimes().BusySince(cpu0)
	cell.Load1After = LoadAvg1()
	for i, n := range names {
		if len(all[i]) > 0 {
			slices.Sort(all[i])
			cell.P50[n] = all[i][len(all[i])/2]
		}
	}
	for k, v := range perRow {
		cell.Ratios[k] = spreadOf(v)
	}
	cell.Floor = spreadOf(floor)
	return cell, nil
}

// Stepper starts one goroutine per worker, kept for the whole cell; step(i)
// hands each its attempt of contender i, waits for all of them and returns
// how long the slowest took. Every attempt must take its free key.
func Stepper(ctx context.Context, names []string, attempts [][]Attempt, workers int) (step func(i int) (time.Duration, error), stop func()) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fail  error
		start = make([]chan int, workers)
	)
	for w := range workers {
		start[w] = make(chan int)
		go func() {
			for i := range start[w] {
				ok, err := attempts[i][w](ctx)
				if err != nil || !ok {
					mu.Lock()
					if fail == nil {
						fail = fmt.Errorf("goroutine %d: took the lock: %v, error: %v", w, ok, err)
					}
					mu.Unlock()
				}
				wg.Done()
			}
		}()
	}
	step = func(i int) (time.Duration, error) {
		t0 := time.Now()
		wg.Add(workers)
		for _, c := range start {
			c <- i
		}
		wg.Wait()
		d := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		return d, fail
	}
	stop = func() {
		for _, c := range start {
			close(c)
		}
	}
	return step, stop
}

// FreeReport is the outcome of [Free].
type FreeReport struct {
	Cells  []*FreeCell
	Allocs []FreeAllocs
	// Options are the options the run used, defaults filled in.
	Options FreeOptions
	Took    time.Duration
}

// Free measures the lock-for-free table: a cell per SQL target of targets
// (PostgreSQL directly, behind PgBouncer, MySQL/MariaDB; in their order)
// and goroutine count of opts.Workers, then the allocations per call of
// every adapter and plain transaction on each SQL target of loopback (the
// same servers without a link: a link's goroutines would count too).
func Free(ctx context.Context, targets, loopback []Target, opts FreeOptions) (*FreeReport, error) {
	opts = opts.withDefaults()
	t0 := time.Now()
	r := &FreeReport{Options: opts}
	for _, t := range targets {
		if t.Dialect != Postgres && t.Dialect != MySQL {
			continue
		}
		for _, w := range opts.Workers {
			c, err := MeasureFreeCell(ctx, t, w, opts)
			if err != nil {
				return r, err
			}
			r.Cells = append(r.Cells, c)
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "  lock for free: %s, %d goroutines: %d rounds in %v, load %.2f → %.2f, CPU busy %s\n",
					t.Name, w, c.Rounds, c.Took.Round(time.Millisecond),
					c.Load1Before, c.Load1After, pct(c.CPUBusy))
			}
		}
	}
	for _, t := range loopback {
		if t.Dialect != Postgres && t.Dialect != MySQL {
			continue
		}
		for _, n := range allocNames(t.Dialect) {
			a, err := MeasureAllocs(ctx, t, n, opts.AllocCalls)
			if err != nil {
				return r, err
			}
			r.Allocs = append(r.Allocs, a)
		}
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "  allocations per call: %s\n", t.Name)
		}
	}
	r.Took = time.Since(t0)
	return r, nil
}

func pct(f float64) string {
	if f < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}
