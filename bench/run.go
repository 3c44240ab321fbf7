package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Load is one way of driving a contender.
type Load struct {
	// Name is the load's description; Short its column label.
	Name, Short string
	// Workers is the number of goroutines making attempts.
	Workers int
	// SameKey puts every goroutine on one key; otherwise each has its own.
	SameKey bool
	// Held makes another holder keep the key for the whole measurement, so
	// every attempt loses: it measures how fast a loser returns.
	Held bool
}

// The loads of the comparison.
var (
	Load1    = Load{Name: "1 goroutine, distinct keys (uncontended)", Short: "1×distinct", Workers: 1}
	Load8    = Load{Name: "8 goroutines, distinct keys (uncontended)", Short: "8×distinct", Workers: 8}
	LoadHeld = Load{Name: "1 goroutine, key held by another holder (every try loses)", Short: "1×held", Workers: 1, SameKey: true, Held: true}
	LoadOne8 = Load{Name: "8 goroutines, one key (contended, try-once)", Short: "8×one key", Workers: 8, SameKey: true}
)

// maxWorker is the most goroutines a load uses.
const maxWorker = 8

// Loads returns the four loads of the comparison, in report order.
func Loads() []Load { return []Load{Load1, Load8, LoadHeld, LoadOne8} }

// Options tune a run.
type Options struct {
	// Cell is the measured time of one (target, contender, load) cell,
	// split over Rounds. The default is 2s.
	Cell time.Duration
	// Rounds interleaves the contenders of a (target, load): each round
	// runs every contender for Cell/Rounds, in a rotated order, so that a
	// change of background load hits all of them alike. The default is 6.
	Rounds int
	// Warmup is the number of unmeasured attempts each goroutine makes
	// before each round (connections opened, statements prepared, scripts
	// loaded). The default is 10.
	Warmup int
	// Prefix starts every lock key, so that runs never share keys. The
	// default is "bench-" and the start time.
	Prefix string
	// Progress receives one line per cell; nil means none.
	Progress io.Writer
}

func (o Options) withDefaults() Options {
	positive(&o.Cell, 2*time.Second)
	positive(&o.Rounds, 6)
	positive(&o.Warmup, 10)
	if o.Prefix == "" {
		o.Prefix = keyPrefix("bench")
	}
	return o
}

// positive sets *v to def when it is not positive (an option left unset).
func positive[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// keyPrefix is what the lock keys of one run start with: what and the start
// time, so that runs never share keys.
func keyPrefix(what string) string {
	return fmt.Sprintf("%s-%x", what, time.Now().UnixNano()&0xffffffffff)
}

// Stats are the measurements of one (target, contender, load) cell.
type Stats struct {
	Target, Contender string
	Load              Load
	// Attempts and Acquired count the measured attempts and the ones that
	// took the lock.
	Attempts, Acquired int64
	// Elapsed is the measured wall time (all rounds).
	Elapsed time.Duration
	// Mallocs is the growth of runtime.MemStats.Mallocs over the measured
	// windows (every goroutine of the process).
	Mallocs uint64
	// CPU is the CPU time (user + system) this process used over the
	// measured windows: the client's cost, which background load on the
	// machine inflates far less than wall-clock figures.
	CPU time.Duration
	// Errors counts attempts that failed; FirstErr is the first failure.
	Errors   int64
	FirstErr error
	// Deadlocks counts attempts that lost because the server chose them as
	// deadlock victims ([ErrDeadlock]); they are counted as losses too.
	Deadlocks int64
	// Overlaps counts critical sections entered while another attempt was
	// inside one for the same key: it must stay 0.
	Overlaps int64

	win, lose []time.Duration // latency samples, sorted by finish
}

// AcqPerSec is the acquisitions per second.
func (s *Stats) AcqPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Acquired) / s.Elapsed.Seconds()
}

// AttemptsPerSec is the attempts per second, won or lost.
func (s *Stats) AttemptsPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Attempts) / s.Elapsed.Seconds()
}

// AllocsPerAttempt is the heap allocations per attempt.
func (s *Stats) AllocsPerAttempt() float64 {
	if s.Attempts == 0 {
		return 0
	}
	return float64(s.Mallocs) / float64(s.Attempts)
}

// CPUPerAttempt is the client CPU time per attempt.
func (s *Stats) CPUPerAttempt() time.Duration {
	if s.Attempts == 0 {
		return 0
	}
	return s.CPU / time.Duration(s.Attempts)
}

// Win returns the q-quantile (0..1) latency of the attempts that took the
// lock, and Lose that of the attempts that lost; 0 when there were none.
func (s *Stats) Win(q float64) time.Duration  { return quantile(s.win, q) }
func (s *Stats) Lose(q float64) time.Duration { return quantile(s.lose, q) }

// Samples returns how many winning and losing latencies were recorded.
func (s *Stats) Samples() (win, lose int) { return len(s.win), len(s.lose) }

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

// Report is the outcome of a run.
type Report struct {
	Targets    []Target
	Contenders []Contender
	Loads      []Load
	Options    Options
	Started    time.Time
	Took       time.Duration
	cells      map[cellKey]*Stats
}

type cellKey struct{ target, contender, load string }

// Cell returns the stats of a cell, or nil when it did not run.
func (r *Report) Cell(target, contender string, load Load) *Stats {
	return r.cells[cellKey{target, contender, load.Short}]
}

// Err joins the first error of every cell that had failures.
func (r *Report) Err() error {
	var errs []error
	for _, t := range r.Targets {
		for _, c := range r.Contenders {
			for _, l := range r.Loads {
				s := r.Cell(t.Name, c.Name, l)
				if s == nil {
					continue
				}
				if s.Errors > 0 {
					errs = append(errs, fmt.Errorf("%s / %s / %s: %d errors, first: %w", t.Name, c.Name, l.Short, s.Errors, s.FirstErr))
				}
				if s.Overlaps > 0 {
					errs = append(errs, fmt.Errorf("%s / %s / %s: %d overlapping critical sections", t.Name, c.Name, l.Short, s.Overlaps))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Runs reports whether contender c runs load l on target t.
func Runs(c Contender, t Target, l Load) bool {
	return c.On(t.Dialect) && !(c.Reference && l.SameKey)
}

// Run measures every contender under every load on every target. A target
// whose contender cannot be opened is an error; failures of single attempts
// are counted in the cells (see [Report.Err]).
func Run(ctx context.Context, targets []Target, contenders []Contender, loads []Load, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	r := &Report{Targets: targets, Contenders: contenders, Loads: loads, Options: opts,
		Started: time.Now(), cells: map[cellKey]*Stats{}}
	bufs := newSampleBufs()
	for ti, t := range targets {
		insts := map[string]Instance{}
		closeAll := func() {
			for _, in := range insts {
				in.Close()
			}
		}
		for _, c := range contenders {
			if !c.On(t.Dialect) {
				continue
			}
			in, err := c.Open(ctx, t, maxWorker+2)
			if err != nil {
				closeAll()
				return r, fmt.Errorf("bench: open %s on %s: %w", c.Name, t.Name, err)
			}
			insts[c.Name] = in
		}
		for li, l := range loads {
			var cs []Contender
			for _, c := range contenders {
				if Runs(c, t, l) {
					cs = append(cs, c)
				}
			}
			for round := range opts.Rounds {
				for i := range cs {
					c := cs[(i+round)%len(cs)]
					k := cellKey{t.Name, c.Name, l.Short}
					s := r.cells[k]
					if s == nil {
						s = &Stats{Target: t.Name, Contender: c.Name, Load: l}
						r.cells[k] = s
					}
					prefix := fmt.Sprintf("%s-%d-%d-%d-%d", opts.Prefix, ti, li, round, i)
					if err := runRound(ctx, insts[c.Name], l, opts, prefix, s, bufs); err != nil {
						closeAll()
						return r, fmt.Errorf("bench: %s on %s, %s: %w", c.Name, t.Name, l.Short, err)
					}
				}
			}
			if opts.Progress != nil {
				for _, c := range cs {
					s := r.cells[cellKey{t.Name, c.Name, l.Short}]
					sortSamples(s)
					fmt.Fprintf(opts.Progress, "%-15s %-10s %-30s %8.0f acq/s  p50 %-8v loser p50 %-8v %6.1f allocs/op  err %d\n",
						t.Name, l.Short, c.Name, s.AcqPerSec(), s.Win(0.5).Round(time.Microsecond),
						s.Lose(0.5).Round(time.Microsecond), s.AllocsPerAttempt(), s.Errors)
				}
			}
		}
		closeAll()
	}
	for _, s := range r.cells {
		sortSamples(s)
	}
	r.Took = time.Since(r.Started)
	return r, nil
}

func sortSamples(s *Stats) {
	slices.Sort(s.win)
	slices.Sort(s.lose)
}

// sampleCap bounds the latency samples kept per goroutine and round; the
// attempts beyond it are still counted.
const sampleCap = 1 << 15

// sampleBufs are the per-goroutine sample buffers, allocated once so that
// recording allocates nothing inside the measured window.
type sampleBufs struct{ win, lose [][]time.Duration }

func newSampleBufs() *sampleBufs {
	b := &sampleBufs{win: make([][]time.Duration, maxWorker), lose: make([][]time.Duration, maxWorker)}
	for i := range maxWorker {
		b.win[i] = make([]time.Duration, 0, sampleCap)
		b.lose[i] = make([]time.Duration, 0, sampleCap)
	}
	return b
}

// runRound runs one contender under one load for Cell/Rounds and adds the
// measurements to s.
func runRound(ctx context.Context, in Instance, l Load, opts Options, prefix string, s *Stats, bufs *sampleBufs) error {
	keys := make([]string, l.Workers)
	for w := range keys {
		if l.SameKey {
			keys[w] = prefix + "-k"
		} else {
			keys[w] = fmt.Sprintf("%s-w%d", prefix, w)
		}
	}
	if l.Held {
		release, err := in.Hold(ctx, keys[0])
		if err != nil {
			return err
		}
		defer func() {
			if err := release(); err != nil && s.FirstErr == nil {
				s.Errors++
				s.FirstErr = fmt.Errorf("release held key: %w", err)
			}
		}()
	}
	// The critical section checks mutual exclusion per key: entering it
	// while another attempt is inside is an overlap.
	inside := make([]atomic.Int32, l.Workers)
	var overlaps atomic.Int64
	attempts := make([]Attempt, l.Workers)
	for w := range attempts {
		slot := &inside[w]
		if l.SameKey {
			slot = &inside[0]
		}
		attempts[w] = in.Bind(keys[w], func() {
			if slot.Add(1) != 1 {
				overlaps.Add(1)
			}
			slot.Add(-1)
		})
	}

	// Attempts run on a context that is never cancelled: database/sql and
	// pgx start a watcher per transaction or query on a cancellable context,
	// which would add allocations to the contenders that pass ctx through
	// and not to those that use GORM's default context. ctx itself is
	// checked between attempts.
	actx := context.WithoutCancel(ctx)
	type result struct {
		attempts, acquired, errors, deadlocks int64
		firstErr                              error
	}
	results := make([]result, l.Workers)
	var wg sync.WaitGroup
	// warm-up, unmeasured
	for w := range l.Workers {
		wg.Go(func() {
			for range opts.Warmup {
				if _, err := attempts[w](actx); err != nil && !errors.Is(err, ErrDeadlock) {
					results[w].errors++
					if results[w].firstErr == nil {
						results[w].firstErr = fmt.Errorf("warm-up: %w", err)
					}
				}
			}
		})
	}
	wg.Wait()
	for w := range l.Workers {
		if results[w].errors > 0 {
			return results[w].firstErr
		}
		bufs.win[w] = bufs.win[w][:0]
		bufs.lose[w] = bufs.lose[w][:0]
	}

	dur := opts.Cell / time.Duration(opts.Rounds)
	start := make(chan struct{})
	for w := range l.Workers {
		wg.Go(func() {
			res := &results[w]
			win, lose := bufs.win[w], bufs.lose[w]
			<-start
			end := time.Now().Add(dur)
			for {
				t0 := time.Now()
				ok, err := attempts[w](actx)
				t1 := time.Now()
				d := t1.Sub(t0)
				res.attempts++
				if errors.Is(err, ErrDeadlock) {
					res.deadlocks++
					err, ok = nil, false
				}
				switch {
				case err != nil:
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
				case ok:
					res.acquired++
					if len(win) < cap(win) {
						win = append(win, d)
					}
				default:
					if len(lose) < cap(lose) {
						lose = append(lose, d)
					}
				}
				if t1.After(end) || ctx.Err() != nil {
					break
				}
			}
			bufs.win[w], bufs.lose[w] = win, lose
		})
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := cpuTime()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	c1 := cpuTime()
	runtime.ReadMemStats(&m1)

	s.Elapsed += elapsed
	s.Mallocs += m1.Mallocs - m0.Mallocs
	s.CPU += c1 - c0
	s.Overlaps += overlaps.Load()
	for w := range l.Workers {
		res := results[w]
		s.Attempts += res.attempts
		s.Acquired += res.acquired
		s.Errors += res.errors
		s.Deadlocks += res.deadlocks
		if s.FirstErr == nil && res.firstErr != nil {
			s.FirstErr = res.firstErr
		}
		s.win = append(s.win, bufs.win[w]...)
		s.lose = append(s.lose, bufs.lose[w]...)
	}
	return ctx.Err()
}

// cpuTime returns the user plus system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
