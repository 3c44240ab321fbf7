package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// FreeAllocs is the heap allocations per call of one contender on one
// target, in one goroutine.
type FreeAllocs struct {
	Target, Contender string // target name, short contender name
	// Allocs and Bytes are runtime.MemStats' Mallocs and TotalAlloc growth
	// over the calls, divided by their number.
	Allocs, Bytes float64
}

// allocNames are the contenders whose allocations the table reports: each
// adapter beside its plain transaction, then the hand-written protocols.
func allocNames(d Dialect) []string {
	ns := []string{FreeGormlock, FreeGormTx, FreeEntlock, FreeEntTx, FreeSQLlock, FreeSQLTx}
	if d == Postgres {
		ns = append(ns, FreePgxlock, FreePgxTx)
	}
	ns = append(ns, FreeHandwritten)
	if d == Postgres {
		ns = append(ns, FreePgxHandwritten)
	}
	return ns
}

// MeasureAllocs opens contender name (a short name, e.g. FreeGormlock) on t
// and counts the heap allocations of calls attempts on a free key, in the
// manner of testing.AllocsPerRun: after 10 warm-up calls, with GOMAXPROCS
// at 1 for the calls, the growth of runtime.MemStats' Mallocs and
// TotalAlloc divided by calls, on a context that never ends (as GORM's
// default context.Background()). Allocations of the pools' own goroutines
// during the calls count too; on loopback, with no other user of the pool,
// there are none.
func MeasureAllocs(ctx context.Context, t Target, name string, calls int) (a FreeAllocs, err error) {
	var c Contender
	for _, x := range Contenders() {
		if x.Name == freeContenders[name] {
			c = x
		}
	}
	if c.Open == nil {
		return a, fmt.Errorf("bench: no contender %q", name)
	}
	in, err := c.Open(ctx, t, 2)
	if err != nil {
		return a, fmt.Errorf("bench: open %s on %s: %w", c.Name, t.Name, err)
	}
	defer func() { err = errors.Join(err, in.Close()) }()
	ctx = context.WithoutCancel(ctx) // as in MeasureFreeCell
	try := in.Bind(fmt.Sprintf("free-allocs-%x-%s-%s", time.Now().UnixNano()&0xffffffffff, t.Name, name), func() {})
	call := func() error {
		ok, err := try(ctx)
		if err == nil && !ok {
			err = errors.New("a free key was not taken")
		}
		return err
	}
	for range 10 {
		if err := call(); err != nil {
			return a, fmt.Errorf("bench: %s on %s: %w", c.Name, t.Name, err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range calls {
		if err := call(); err != nil {
			return a, fmt.Errorf("bench: %s on %s: %w", c.Name, t.Name, err)
		}
	}
	runtime.ReadMemStats(&m1)
	return FreeAllocs{Target: t.Name, Contender: name,
		Allocs: float64(m1.Mallocs-m0.Mallocs) / float64(calls),
		Bytes:  float64(m1.TotalAlloc-m0.TotalAlloc) / float64(calls)}, nil
}
