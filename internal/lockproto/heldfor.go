package lockproto

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// How long a PostgreSQL lock has been held (ormlock.HolderInfo.HeldFor).
//
// No server records when an advisory lock was granted, and ormlock's locks
// live in transactions that may have waited for them (WithWait, a Lead's
// campaign): the transaction's start (pg_stat_activity.xact_start) comes
// before the wait. So a Session's lock transaction says how far into it the
// lock was taken, where another session can read it: in the text of its
// keepalive, a comment after SELECT 1,
//
//	SELECT 1 /* ormlock: lock taken 3200 ms into its transaction */
//
// which is the holder's pg_stat_activity.query between keepalives (visible
// to the holder's role and to pg_read_all_stats, as HeldFor's other inputs
// are). The time is measured by the client, from just before the message
// that begins the transaction to the lock's answer, so it exceeds the
// server's by at most a round trip: HeldFor is then short by at most that.
// Before the first keepalive the holder's last statement is the lock's own
// message or the owner's SET LOCAL right after it, and the holder has been
// idle in transaction since the lock came: HeldFor runs from state_change.
// Any other holder's HeldFor runs from its transaction's start, as before.

// pgTakenRE matches the comment of pgKeepaliveSQL.
var pgTakenRE = regexp.MustCompile(`/\* ormlock: lock taken (\d+) ms into its transaction \*/`)

// pgKeepaliveSQL is the keepalive of a lock transaction whose lock was
// taken taken into it.
func pgKeepaliveSQL(taken time.Duration) string {
	return "SELECT 1 /* ormlock: lock taken " + strconv.FormatInt(max(taken.Milliseconds(), 0), 10) + " ms into its transaction */"
}

// pgPingTaken is PGPing with the keepalive that says when the lock was
// taken. It takes no arguments: the simple protocol, no portal left open.
func pgPingTaken(ctx context.Context, q Querier, taken time.Duration) error {
	if _, err := q.ExecContext(ctx, pgKeepaliveSQL(taken)); err != nil {
		return errs.Wrap(err, "keepalive")
	}
	return nil
}

// pgHeldSince returns when the holder whose pg_stat_activity row says
// state, query, xact_start and state_change got its lock, by the rules
// above, and whether it could tell.
func pgHeldSince(state, query string, xactStart, stateChange time.Time) (time.Time, bool) {
	if xactStart.IsZero() {
		return time.Time{}, false
	}
	if m := pgTakenRE.FindStringSubmatch(query); m != nil {
		if ms, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			return xactStart.Add(time.Duration(ms) * time.Millisecond), true
		}
	}
	if state == "idle in transaction" && !stateChange.IsZero() &&
		(strings.Contains(query, "pg_advisory_xact_lock(") || strings.HasPrefix(query, "SET LOCAL application_name = ")) {
		return stateChange, true
	}
	return xactStart, true
}
