// The verbs of the ledger and the reads: RunOnce, RunScheduled, Migrate,
// Holder, Holders, Runs, Prune, AdvanceFences.

package verbs

import (
	"context"
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
	_ "github.com/ormlock/ormlock/internal/pgxdriver" // pgx's connections, for every adapter (lockproto.RegisterPgDriver)
	"github.com/ormlock/ormlock/internal/sched"
	"github.com/ormlock/ormlock/internal/status"
)

// Claimed runs fn for a claimed run of RunOnce's claim mode, outside the
// ledger's transaction, with the lock session's ctx (carrying the slot),
// and with cfg, the call's settings (WithTxOptions, ClaimNoTx).
type Claimed func(ctx context.Context, p Pool) error

// RunOnce is RunOnceOf for fn in its Locked form, and in claim mode its
// Claimed form: sqllock's and pgxlock's RunOnce.
func RunOnce[B Binder, F any](ctx context.Context, b B, pkg, job string, slot time.Time, fn F, locked Locked[F], claimed Claimed, nilFn bool, opts []config.Option) error {
	return RunOnceOf[lockedCall](ctx, lockedDriver[B, F]{b: b, fn: fn, locked: locked, claimed: claimed}, pkg, job, slot, nilFn, opts)
}

// Run is steps 6 to 8 of RunOnce on an open pool and its ledger run: the
// claim mode is refused inside the caller's transaction, and the lock of
// (job, slot) is prepared.
func (p Pool) Run(ctx context.Context, job string, slot time.Time) (*ledger.Run, *lockproto.Op, error) {
	verb := p.Pkg + ".RunOnce"
	if p.Cfg.Claim && p.Tx != nil {
		return nil, nil, fmt.Errorf("%w: %s: WithClaim with a db inside a transaction: claim mode commits its ledger rows itself and runs fn outside any transaction", errs.ErrInvalidArgument, verb)
	}
	h := lockproto.HeldForTx
	if p.Cfg.Claim { // held for the run, outside fn's transaction
		h = lockproto.HeldForSession
	}
	op, err := p.Op(ctx, "RunOnce", keys.RunKey(job, slot), p.Cfg, true, h)
	if err != nil {
		return nil, nil, err
	}
	// the claim reads the job's pause flag where the controls table exists
	// (asked once per pool and table, ledger.Table.ControlsOn)
	r, err := ledger.NewRun(verb, op, job, slot, func(t *ledger.Table) bool { return ledger.CtlOf(t).ControlsOn(ctx, p.cacheKey(), p.reader()) })
	if err != nil {
		return nil, nil, err
	}
	return r, op, nil
}

// RunScheduled runs once (the adapter's RunOnce on the same handle) for
// the slot of schedule at the current time, and first, with
// ormlock.WithCatchUp, for the missed slots before it (ledger.Scheduled).
func RunScheduled[B Binder](ctx context.Context, b B, pkg, job string, schedule sched.Slotter, nilFn bool, opts []config.Option, once func(slot time.Time) error) error {
	var a Args
	if schedule == nil {
		a.Err = fmt.Errorf("%w: %s.RunScheduled: nil schedule", errs.ErrInvalidArgument, pkg)
	}
	a.NilFn = nilFn
	p, err := Open(ctx, b, pkg, "RunScheduled", opts, a)
	defer p.release() // each run opens its own pool too
	if err != nil {
		return err
	}
	return ledger.Scheduled(ctx, pkg+".RunScheduled", job, schedule, func() (ledger.Reader, error) {
		t, err := ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
		if err != nil {
			return ledger.Reader{}, err
		}
		rd := ledger.Reader{Cfg: p.Cfg, T: t, Q: p.reader()}
		if p.Tx == nil {
			rd.DB = p.sqlDB()
		}
		rd.Controls = ledger.CtlOf(t).ControlsOn(ctx, p.cacheKey(), p.reader())
		return rd, nil
	}, once)
}

// Migrate creates or upgrades the ledger and fence tables, under the
// migration lock.
func Migrate[B Binder](ctx context.Context, b B, pkg string, opts []config.Option) error {
	p, err := Open(ctx, b, pkg, "Migrate", opts, Args{})
	defer p.release()
	if err != nil {
		return err
	}
	cfg := p.Cfg
	cfg.Wait, cfg.Namespace = max(cfg.Wait, ledger.MigrateWait), ""
	cfg.Lease = 0 // the migration lock is the server's, whatever the handle's mechanism
	op, err := p.Op(ctx, "Migrate", ledger.MigrateKey(cfg.LedgerTable), cfg, false, lockproto.HeldForTx)
	if err != nil {
		return p.mend(err)
	}
	if err := ledger.Migrate(ctx, p.sqlDB(), op); err != nil {
		return p.mend(err)
	}
	ledger.MarkControls(p.cacheKey(), cfg.LedgerTable)
	return nil
}

// Holder asks the server who holds k (Shared(k): as for k).
func Holder[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) (lockproto.HolderInfo, error) {
	if keys.IsShared(k) {
		k = keys.Plain(k)
	}
	p, op, err := Prepare(ctx, b, pkg, "Holder", k, opts, Args{}, false, lockproto.HeldForHolder)
	defer p.release()
	if err != nil {
		return lockproto.HolderInfo{}, p.mend(err)
	}
	h, err := lockproto.LookupHolder(ctx, p.reader(), op)
	return h, p.mend(err)
}

// Holders asks the server for every holder of k, whatever its shape.
func Holders[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) ([]lockproto.HolderInfo, error) {
	p, op, err := Prepare(ctx, b, pkg, "Holders", k, opts, Args{}, false, lockproto.HeldForTx)
	defer p.release()
	if err != nil {
		return nil, p.mend(err)
	}
	hs, err := lockproto.LookupHolders(ctx, p.reader(), op)
	return hs, p.mend(err)
}

// Runs reads the last limit runs of job from the ledger, its stale runs
// marked (ledger.Table.MarkStale).
func Runs[B Binder](ctx context.Context, b B, pkg, job string, limit int, opts []config.Option) ([]ledger.Row, error) {
	p, err := Open(ctx, b, pkg, "Runs", opts, Args{Err: ledger.CheckRuns(pkg+".Runs", job, limit)})
	defer p.release()
	if err != nil {
		return nil, err
	}
	t, err := ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
	if err == nil {
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return nil, p.mend(err)
	}
	rs, err := t.Runs(ctx, p.reader(), p.Cfg.Namespace, job, limit)
	if err == nil {
		// a row that looks stale is read again in a transaction of its
		// own on the pool, or in the caller's transaction (which holds a
		// connection the pool may not have a second of)
		fresh := p.sqlDB()
		if p.Tx != nil {
			fresh = nil
		}
		_, err = t.MarkStale(ctx, p.reader(), fresh, p.Cfg, rs, 0)
	}
	return rs, p.mend(err)
}

// Prune deletes the ledger's finished and stale rows older than olderThan,
// the rate table's idle tokens and the lease rows expired for longer.
func Prune[B Binder](ctx context.Context, b B, pkg string, olderThan time.Duration, opts []config.Option) (int64, error) {
	p, err := Open(ctx, b, pkg, "Prune", opts, Args{Err: ledger.CheckPrune(pkg+".Prune", olderThan)})
	defer p.release()
	if err != nil {
		return 0, err
	}
	var t *ledger.Table
	if err = p.ownTx("Prune", "pruning commits batch by batch"); err == nil {
		err = ledger.CheckCatchUp(pkg+".Prune", olderThan, p.Cfg)
	}
	if err == nil {
		t, err = ledger.NewTable(p.Dialect, p.Cfg.LedgerTable)
	}
	if err == nil {
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return 0, p.mend(err)
	}
	n, err := t.PruneOlderThan(ctx, p.sqlDB(), p.Cfg, olderThan, ledger.PruneBatch)
	if err == nil {
		// the rate table's idle tokens, not counted in n (ledger rows)
		_, err = ledger.PruneRate(ctx, p.Dialect, p.sqlDB(), p.Cfg, olderThan)
	}
	if err == nil {
		// the lease table's rows expired for longer than olderThan, not
		// counted in n either (their epochs live on in the fencing counters)
		_, err = ledger.PruneLease(ctx, p.Dialect, p.sqlDB(), p.Cfg, olderThan)
	}
	return n, p.mend(err)
}

// AdvanceFences moves every fencing counter of the namespace by by.
func AdvanceFences[B Binder](ctx context.Context, b B, pkg string, by int64, opts []config.Option) (int64, error) {
	p, err := Open(ctx, b, pkg, "AdvanceFences", opts, Args{Err: ledger.CheckAdvance(pkg+".AdvanceFences", by)})
	defer p.release()
	if err != nil {
		return 0, err
	}
	if err = p.ownTx("AdvanceFences", "the counters are moved in a transaction of their own"); err == nil {
		// a hot standby or a fake-lock engine is refused as by every verb,
		// not with the server's own read-only error
		err = p.CheckPool(ctx)
	}
	if err != nil {
		return 0, p.mend(err)
	}
	n, err := ledger.AdvanceFences(ctx, p.sqlDB(), p.Dialect, pkg+".AdvanceFences", by, p.Cfg)
	return n, p.mend(err)
}

// Usage reads the tokens of the rate limit k (keys.Rate) in use
// (lockproto.ReadRateUsage); any other key is refused.
func Usage[B Binder](ctx context.Context, b B, pkg string, k keys.Key, opts []config.Option) (status.RateUsage, error) {
	var a Args
	if k.Validate() == nil && !keys.IsRate(k) {
		a.Err = fmt.Errorf("%w: %s.Usage of %s: Usage reads a rate limit (ormlock.Rate)", errs.ErrInvalidArgument, pkg, k.String())
	}
	p, err := Open(ctx, b, pkg, "Usage", opts, a)
	defer p.release()
	if err != nil {
		return status.RateUsage{}, err
	}
	op, err := p.Op(ctx, "Usage", k, p.Cfg, false, lockproto.HeldForTransaction)
	if err != nil {
		return status.RateUsage{}, p.mend(err)
	}
	u, err := lockproto.ReadRateUsage(ctx, p.reader(), op)
	return u, p.mend(err)
}
