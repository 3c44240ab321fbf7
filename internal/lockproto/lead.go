package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// Leader election: the campaign loop behind every adapter's Lead, written
// once. An adapter builds the Op (verb "Lead") and calls [Op.Lead] with its
// pool; nothing else is adapter-specific.

// leadWait is how long one campaign attempt waits for the lock on the
// server (lock_timeout, GET_LOCK's timeout) before it asks again: the wait
// is the server's, so a campaign never polls faster than that; a context
// deadline that comes sooner shortens it, and cancelling the context ends
// it at once.
const leadWait = 30 * time.Second

// The bounds of the backoff between campaign attempts that failed with an
// error (a connection refused, a server restarting). It doubles from
// leadBackoffMin up to leadBackoffMax, with a jitter, and starts over after
// every term.
const (
	leadBackoffMin = 100 * time.Millisecond
	leadBackoffMax = 5 * time.Second
)

// Lead campaigns for o's key on db and runs fn while this caller leads:
//
//   - a campaign is a Session (see [Op.Session]) whose wait is leadWait
//     (none for the first attempt with Cfg.FirstTry, closed once it ended),
//     asked again as soon as a wait ran out, and after an error with a
//     bounded backoff; an error that no retry can cure (see Permanent)
//     is returned at once;
//   - elected, fn runs with a context that is cancelled with cause
//     errs.ErrLockLost when leadership is lost, and carries the term's
//     fencing token with WithFencing (every term takes a new one);
//   - when fn returns by itself, the key is released and Lead returns fn's
//     error (nil: resigned), joined with errs.ErrLockLost if the lock
//     turned out lost by the time it was released;
//   - when leadership was lost while fn ran (fn's context ended with
//     ErrLockLost), Lead waits for fn to return and campaigns again;
//   - when o.Resign is set, each term polls it for a resign (see
//     leadresign.go); one asked while the term leads cancels fn's context
//     with a cause wrapping errs.ErrLockLost that names its author and
//     reason, and once fn has returned and the key is released, Lead
//     waits out the resign's cooldown, then campaigns again;
//   - when ctx ends, Lead returns context.Cause(ctx), once fn (if it runs)
//     has returned and what was held is released.
//
// Observers see each term as a Session's events with Verb "Lead":
// acquired is elected, lock_lost is deposed (asked to resign too),
// released is a term that ended
// by fn's return or ctx's end; a campaign's wait that ran out is
// not_acquired.
func (o *Op) Lead(ctx context.Context, db *sql.DB, fn func(ctx context.Context) error) error {
	return Campaign(ctx, o, func(ctx context.Context, term *Op, fn func(ctx context.Context) error) error {
		if err := CheckServer(ctx, term, db); err != nil {
			return err
		}
		return term.Session(ctx, db, fn)
	}, fn)
}

// Campaign is Lead's loop for an adapter whose Session is not
// [Op.Session] on a *sql.DB (a pgx pool): session runs one term, a Session
// of term (a fresh Op per term, carrying the campaign's wait) that calls fn
// while the lock is held, after any per-attempt check.
func Campaign(ctx context.Context, o *Op, session func(ctx context.Context, term *Op, fn func(ctx context.Context) error) error, fn func(ctx context.Context) error) error {
	backoff := leadBackoffMin
	first := o.Cfg.FirstTry // closed once the first attempt has ended
	tried := func() {
		if first != nil {
			close(first)
			first = nil
		}
	}
	defer tried()
	for {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		wait := leadWait
		if first != nil {
			wait = 0 // the first attempt tries once
		}
		term, err := nextTerm(o, wait)
		if err != nil {
			return err
		}
		var elected, deposed bool
		var asked *ResignAsk
		start := time.Now()
		err = session(ctx, term, func(fctx context.Context) error {
			// tried stays open while elected: the caller's fn tells it
			elected = true
			rctx, w := watchResign(fctx, term, o.Resign, time.Now()) // leadresign.go
			ferr := fn(term.TermContext(rctx))                       // event.go
			asked = w.end()
			deposed = errors.Is(context.Cause(fctx), errs.ErrLockLost)
			return ferr
		})
		tried()
		switch {
		case ctx.Err() != nil:
			return context.Cause(ctx)
		case asked != nil:
			// released: stay out for the cooldown, then campaign again
			if !sleepCtx(ctx, asked.cooldown()) {
				return context.Cause(ctx)
			}
			backoff = leadBackoffMin
			continue
		case deposed:
			backoff = leadBackoffMin
			continue // campaign again at once
		case elected:
			return err
		case Permanent(err):
			return err
		case errors.Is(err, errs.ErrNotAcquired) && time.Since(start) >= term.Cfg.Wait/2:
			backoff = leadBackoffMin
			continue // the server's wait ran out: ask again
		}
		if !sleepCtx(ctx, jitter(backoff)) {
			return context.Cause(ctx)
		}
		backoff = min(2*backoff, leadBackoffMax)
	}
}

// nextTerm returns a fresh Op for one campaign attempt of o: its own timings
// and fencing token, and the campaign's wait.
func nextTerm(o *Op, wait time.Duration) (*Op, error) {
	cfg := o.Cfg
	cfg.Wait, cfg.FirstTry = wait, nil
	t, err := NewOpHeld(o.Dialect, o.Verb, o.Key, cfg, o.hold)
	if err != nil {
		return nil, err
	}
	t.Job, t.fence.id, t.LockConns, t.LazyDB, t.Resign = o.Job, o.fence.id, o.LockConns, o.LazyDB, o.Resign
	newTerm(o, t) // event.go
	return t, nil
}

// Permanent reports whether err is one that no retry can cure: an invalid
// key, argument or option, an unsupported dialect or server, or a server's
// refusal of the login, the database, a privilege or the SQL (PostgreSQL
// SQLSTATE classes 28, 3D and 42, and a prepared statement missing behind a
// pooler, 26000; MySQL/MariaDB errors 1044, 1045, 1049, 1064, 1142, 1146).
// A campaign (Lead) returns such an error at once and retries the others
// (a connection refused or lost, a server restarting).
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errs.ErrInvalidKey) || errors.Is(err, errs.ErrInvalidArgument) || errors.Is(err, errs.ErrUnsupportedDialect) {
		return true
	}
	if s := SQLState(err); strings.HasPrefix(s, "28") || strings.HasPrefix(s, "3D") || strings.HasPrefix(s, "42") {
		return true
	}
	if errs.PreparedClash(err) {
		return true // the DSN's exec mode behind a pooler: see errs.PoolerHint
	}
	return isMySQLErrno(err, 1044, 1045, 1049, 1064, 1142, 1146)
}

// jitter returns d give or take a fifth, so that replicas that failed
// together do not retry in step.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
