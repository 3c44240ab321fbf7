package webui

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/verbs"
)

// Rate limits (ormlock.Rate) in the view: for each key of WithRates, its
// tokens in use as the rate table shows them (each adapter's Usage), and
// with WithRefusals how many takes this process saw refused, by key.

// Refusals counts, by key, the refusals ([ormlock.ErrNotAcquired]) that
// this process's verbs report to it: an [ormlock.Observer] to give the
// verbs (ormlock.WithObserver, per call or as the plugin's or wrapper's
// default) and to the view (WithRefusals), which shows the count of each
// key of WithRates and WithLocks. A refusal of a [ormlock.Rate] is its
// limit reached; of a lock, the lock held elsewhere. It counts at most
// MaxRefusalKeys keys; the refusals of further keys are counted under "".
// The counts are this process's own, since its start: a fleet's total is
// the sum over its replicas (the OpenTelemetry hook, otelormlock with
// WithKeyAttribute, exports them so).
type Refusals struct {
	mu    sync.Mutex
	byKey map[string]int64
}

// MaxRefusalKeys bounds the keys a Refusals tells apart.
const MaxRefusalKeys = 1000

var _ ormlock.Observer = (*Refusals)(nil)

// NewRefusals returns an empty count.
func NewRefusals() *Refusals { return &Refusals{byKey: map[string]int64{}} }

// Observe counts e when it is a refusal: an ormlock.EventNotAcquired of a
// lock held elsewhere (no error) or of a rate limit reached (its cause
// says when the next token is due), a wait for either that ran out
// included; not a failure of another kind (a connection error).
func (r *Refusals) Observe(_ context.Context, e ormlock.Event) {
	var limited *errs.RateRefused
	if e.Kind != ormlock.EventNotAcquired || e.Err != nil && !errors.As(e.Err, &limited) && !errors.Is(e.Err, context.DeadlineExceeded) {
		return
	}
	k := e.Key.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byKey[k]; !ok && len(r.byKey) >= MaxRefusalKeys {
		k = ""
	}
	r.byKey[k]++
}

// Count returns the refusals counted for key.
func (r *Refusals) Count(key ormlock.Key) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key.String()]
}

// rateRow is a rate limit's line in the view.
type rateRow struct {
	Key      string
	Limit    string // "n per per"
	Used     int
	Free     int
	NextFree shownTime
	Refused  string // "-" without WithRefusals
}

// usage reads rate key k's tokens in use, on the view's transaction tx.
func (r *reader) usage(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, k ormlock.Key) (ormlock.RateUsage, error) {
	return verbs.Usage(ctx, binder{r, d, tx}, "webui", k, nil)
}

// rates fills o's rate limits.
func (h *handler) rates(ctx context.Context, tx *sql.Tx, d lockproto.Dialect, o *overview, loc *time.Location) error {
	for _, k := range h.s.rates {
		u, err := h.r.usage(ctx, tx, d, k)
		if err != nil {
			return err
		}
		row := rateRow{Key: clean(k.String(), 300), Limit: strconv.Itoa(u.N) + " per " + u.Per.String(), Used: u.Used, Free: u.Free, Refused: "-"}
		if !u.NextFree.IsZero() {
			row.NextFree = showTime(u.NextFree, loc)
		}
		if h.s.refusals != nil {
			row.Refused = strconv.FormatInt(h.s.refusals.Count(k), 10)
		}
		o.Rates = append(o.Rates, row)
	}
	return nil
}
