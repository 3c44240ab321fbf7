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
)

// ErrNotLeader is returned by [Elector.IsLeader] when this instance is not
// the leader (another instance holds the leader lock, or the Elector is
// closed); gocron then skips the run.
var ErrNotLeader = errors.New("ormlock: not the leader")

// Elector is a gocron v2 elector (gocron.WithDistributedElector): of the
// schedulers that share the database and the leader key, one leads, and
// only the leader runs jobs.
//
// Leadership is a lock on the leader key held with Session semantics
// ([gormlock.Session]): a dedicated connection holds it for as long as this
// instance leads, with a keepalive ([ormlock.WithKeepalive], default
// 2s) that notices a lost connection. A background
// goroutine tries to take the lock at start-up and then every [WithRetry]
// interval while it does not lead; [Elector.Close] stops it and releases the
// lock, so another instance takes over within its retry interval.
//
// Guarantee, and its limit: the database lets one connection hold the lock at
// a time, so two instances never both hold it. But an instance learns that
// it lost the lock (its connection was killed, the server restarted or
// failed over) only at its next keepalive, up to two intervals later, and
// meanwhile another instance may already lead: runs that start in that
// window may happen twice. Leader election also knows nothing of slots: a new
// leader runs whatever its own scheduler fires next, so a run the old leader
// made just before stopping can be repeated, and one due in the leaderless
// gap is missed. Where each run must happen exactly once, use the [Locker]
// (gocron uses the Elector instead of the Locker when both are set).
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

// NewElector starts campaigning for the lock named key on b and returns
// once the first attempt has ended: when the lock was free, this instance
// leads already. Every instance of one service must use the same key (and
// namespace); services with different keys elect independently.
//
// Options: [WithRetry], [WithErrorHandler]. Bad input (an empty or invalid
// key, an invalid Backend or option) is an error wrapping
// [ormlock.ErrInvalidArgument] or [ormlock.ErrInvalidKey] that names it.
// The Elector returned with such an error fails closed: it never campaigns,
// and IsLeader returns that error, so a caller that ignored it runs nothing.
// Call [Elector.Close] when done, or the campaign goes on (and a leader
// keeps its lock) until the process exits.
func NewElector(b Backend, key string, opts ...Option) (*Elector, error) {
	const verb = "scheduler.NewElector"
	cfg, err := newConfig(opts)
	if bErr := b.check(verb); bErr != nil {
		err = bErr
	} else if kErr := ormlock.Name(key).Validate(); kErr != nil {
		err = fmt.Errorf("%w: %s: leader key %q", kErr, verb, key)
	}
	if err != nil {
		return &Elector{err: err}, err
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Elector{b: b, key: key, cfg: cfg, stop: stop, done: make(chan struct{})}
	first := make(chan struct{})
	go e.campaign(ctx, first)
	<-first
	return e, nil
}

// IsLeader returns nil when this instance leads, else [ErrNotLeader]. It
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

func (e *Elector) campaign(ctx context.Context, first chan struct{}) {
	defer close(e.done)
	var once sync.Once
	signal := func() { once.Do(func() { close(first) }) }
	defer signal()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		err := e.b.session(ctx, e.key, func(lctx context.Context) error {
			e.leader.Store(true)
			// Lead until Close, or until the keepalive finds the lock
			// lost; the flag drops before the lock is released.
			defer e.leader.Store(false)
			signal()
			<-lctx.Done()
			return nil
		})
		signal()
		closing := ctx.Err() != nil
		// Not reported: another instance leads, or Close ended an
		// attempt. A failed release at Close is reported.
		if err != nil && !errors.Is(err, ormlock.ErrNotAcquired) && !(closing && errors.Is(err, context.Canceled)) {
			e.cfg.report(wrapf(err, "leader key %q", e.key))
		}
		if closing {
			return
		}
		t.Reset(e.cfg.retry)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
