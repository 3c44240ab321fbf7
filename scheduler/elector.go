package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/schedhook"
)

// ErrNotLeader is returned by [Elector.IsLeader] when this instance is not
// the leader (another instance holds the leader lock, or the Elector is
// closed); gocron then skips the run.
var ErrNotLeader = errors.New("ormlock: not the leader")

// Elector is a gocron v2 elector (gocron.WithDistributedElector): of the
// schedulers that share the database and the leader key, one leads, and only
// the leader runs jobs. Leadership is the adapter's Lead ([gormlock.Lead]):
// after a first try at start-up, a background goroutine waits for the lock
// on the server while this instance does not lead, so it takes over as soon
// as the leader releases it or its connection dies; [Elector.Close]
// releases the lock. With [WithoutCampaign] it follows: it never
// campaigns, and IsLeader always returns ErrNotLeader. A leader asked to
// step down (ormlock.Resign, docs/OPERATIONS.md) stops leading within one
// keepalive interval, stays out of the election for the resign's
// cooldown, and campaigns again after it.
//
// It is only as exclusive as the keepalive allows: a leader learns of a lost
// lock up to two keepalive intervals late, and election knows nothing of
// slots, so at a change of leader a run may happen twice or be missed. Where
// each run must happen exactly once, use the [Locker]. See docs/SCHEDULES.md
// (Elector (gocron)).
type Elector struct {
	b      Backend
	key    string
	cfg    config
	leader atomic.Bool
	stop   context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error // the constructor's error: IsLeader returns it
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning for the lock named key on b and returns once
// the first attempt has ended (when the lock was free, this instance leads
// already). Every instance of one service uses the same key and namespace.
// Bad input is an error wrapping [ormlock.ErrInvalidArgument] or
// [ormlock.ErrInvalidKey], and the Elector returned with it fails closed
// (IsLeader returns that error). Call [Elector.Close] when done, or the
// campaign (and a leader's lock) lasts until the process exits. See
// docs/SCHEDULES.md (Elector (gocron)).
func NewElector(b Backend, key string, opts ...Option) (*Elector, error) {
	const verb = "scheduler.NewElector"
	cfg, err := newConfig(opts)
	if bErr := b.Check(verb); bErr != nil {
		err = bErr
	} else if b.Funcs().Lead == nil {
		err = fmt.Errorf("%w: %s: the Backend has no Lead", ormlock.ErrInvalidArgument, verb)
	} else if kErr := ormlock.Name(key).Validate(); kErr != nil {
		err = fmt.Errorf("%w: %s: leader key %q", kErr, verb, key)
	}
	if err != nil {
		return &Elector{err: err}, err
	}
	if cfg.follow { // WithoutCampaign: never leads, nothing runs
		return &Elector{b: b, key: key, cfg: cfg}, nil
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Elector{b: b, key: key, cfg: cfg, stop: stop, done: make(chan struct{})}
	first, tried := make(chan struct{}), make(chan struct{})
	go e.campaign(ctx, first, tried)
	select {
	case <-first: // elected, or the campaign's first call returned
	case <-tried: // the first attempt found the lock held
	}
	return e, nil
}

// IsLeader returns nil when this instance leads, else [ErrNotLeader]
// (always, for a follower made with [WithoutCampaign]). It
// does not touch the database (the background goroutine keeps the state),
// so it is cheap enough for gocron to call before every run. ctx is not
// used.
func (e *Elector) IsLeader(context.Context) error {
	switch {
	case e == nil:
		return fmt.Errorf("%w: scheduler.Elector: nil Elector (build one with scheduler.NewElector)", ormlock.ErrInvalidArgument)
	case e.err != nil:
		return e.err
	case e.leader.Load():
		return nil
	}
	return ErrNotLeader
}

// Close stops the campaign and, when this instance leads, gives up the lead
// and releases the lock, then returns: other instances may take over from
// then on. It returns nil, and is safe to call more than once.
func (e *Elector) Close() error {
	if e == nil || e.stop == nil { // nil, zero or failed: nothing runs
		return nil
	}
	e.once.Do(func() {
		e.stop()
		<-e.done
	})
	return nil
}

// campaign campaigns with the backend's Lead until Close, its first
// attempt trying the lock once (schedhook.FirstTry closes tried after
// it), so that NewElector returns at once (leading when the lock was
// free). Every term is a Lead's, so a leader asked to resign steps down
// whichever attempt elected it. A loss is reported when found; Lead
// retries connection errors itself, and after one it does not retry (a
// refused login) the campaign starts again after the retry interval.
func (e *Elector) campaign(ctx context.Context, first, tried chan struct{}) {
	defer close(e.done)
	var once sync.Once
	signal := func() { once.Do(func() { close(first) }) }
	defer signal()
	lead := func(lctx context.Context) error {
		e.leader.Store(true)
		signal()
		// Lead until Close, or until the keepalive finds the lock lost;
		// the flag drops before the lock is released.
		<-lctx.Done()
		e.leader.Store(false)
		if cause := context.Cause(lctx); errors.Is(cause, ormlock.ErrLockLost) {
			e.cfg.report(wrapf(cause, "leader key %q", e.key))
		}
		return nil
	}
	f := e.b.Funcs()
	err := f.Lead(ctx, e.key, lead, schedhook.FirstTry(tried))
	signal()
	for ctx.Err() == nil {
		// Not reported: another instance led at the first try, or a
		// loss (lead reports it). Lead returns only at Close or with an
		// error it does not retry: the campaign pauses then.
		if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) && !errors.Is(err, ormlock.ErrLockLost) {
			e.cfg.report(wrapf(err, "leader key %q", e.key))
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.cfg.retry):
			}
		}
		err = f.Lead(ctx, e.key, lead)
	}
}
