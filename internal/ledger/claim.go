package ledger

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// claim claims (ns, job, slot) for owner (see the package doc): ok is false when
// the slot is already done or skipped; started is the claim's started_at, which the
// finishing UPDATE matches. With ctl (the controls table exists) the
// statement reads the job's pause flag too, and a slot it would take of a
// paused job is errClaimPaused (pause.go).
func (t *Table) claim(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner string, ctl bool) (started time.Time, ok bool, err error) {
	started, ok, err = t.sql.claim(ctx, t, q, ns, job, slot, owner, ctl)
	if err != nil && ctl && t.ctl.pausedErr(err) {
		return time.Time{}, false, errClaimPaused
	}
	return started, ok, err
}

// finish records the end of the claim (job, slot, owner, started): status
// done or failed, finished_at now, error text (NULL when empty). It reports
// an error wrapping errs.ErrLockLost when the claim is no longer there,
// i.e. another instance took the row over.
func (t *Table) finish(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner string, started time.Time, status, errText string) error {
	var errArg any
	if errText != "" {
		errArg = ErrorText(errText)
	}
	res, err := q.ExecContext(ctx, t.sql.finishSQL(t), string(status), errArg, job, t.slotArg(slot), owner, t.slotArg(started), ns)
	if err != nil {
		return t.wrap("mark "+string(status), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return t.wrap("mark "+string(status), err)
	}
	if n != 1 {
		return fmt.Errorf("%w: ledger table %q: the claim of %q at %s by %q was taken over before it could be marked %s",
			errs.ErrLockLost, t.name, job, slot.Format(time.RFC3339Nano), owner, status)
	}
	return nil
}

// abandon marks failed the 'running' claim of (ns, job, slot) by owner,
// whatever its started_at, with errText; no such row is not an error. The
// caller holds the (job, slot) lock, so the row cannot be a live run's.
func (t *Table) abandon(ctx context.Context, q lockproto.Querier, ns, job string, slot time.Time, owner, errText string) error {
	if _, err := q.ExecContext(ctx, t.sql.abandonSQL(t), ErrorText(errText), ns, job, t.slotArg(slot), owner); err != nil {
		return t.wrap("mark an interrupted claim failed", err)
	}
	return nil
}

// ErrorText prepares an error message for the ledger's error column: valid
// UTF-8 without NUL bytes, at most 4000 bytes (cut at a character boundary,
// marked "…[truncated]").
func ErrorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= maxErrorBytes {
		return s
	}
	const mark = "…[truncated]"
	cut := maxErrorBytes - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
