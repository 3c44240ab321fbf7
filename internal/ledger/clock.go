package ledger

import (
	"context"
	"fmt"
	"time"
)

// The clocks of catch-up and Prune, described in
// docs/SCHEDULES.md (Clocks of catch-up and Prune). A Prune deletes the rows of slots before the server's now
// minus its window; a catch-up lists the slots after the server's now
// minus its window, read with the ledger: both edges are judged by one
// clock, the database server's, so a 'done' row a catch-up needs is never
// gone when Prune's window is at least the catch-up window, whatever the
// clocks of the pruner and the catching-up replica say. The replica's own
// clock still picks the current slot (the trigger's reading), so a
// catch-up refuses to run at all when it is more than MaxClockSkew from the
// server's.
const (
	// MaxClockSkew is how far a catching-up caller's clock may be from
	// the database server's: further, RunScheduled with ormlock.WithCatchUp
	// returns an error naming the difference and runs nothing.
	MaxClockSkew = time.Minute
	// PruneMargin is how much longer than the catch-up window a Prune
	// configured with it must reach back (CheckCatchUp): it covers a
	// catch-up's claim coming a little after the ledger read that chose
	// its slot, on the server's clock.
	PruneMargin = time.Minute
)

// ServerNow reads the database server's clock (clock_timestamp(),
// UTC_TIMESTAMP(6)), the clock the ledger's times come from.
func (t *Table) ServerNow(ctx context.Context, q Querier) (time.Time, error) {
	rows, err := q.QueryContext(ctx, t.sql.serverNowSQL())
	if err != nil {
		return time.Time{}, t.wrap("read the server's clock", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return time.Time{}, t.wrap("read the server's clock", err)
		}
		return time.Time{}, fmt.Errorf("ormlock: ledger table %q: read the server's clock: no row", t.name)
	}
	now, err := t.sql.scanTime(t, rows.Scan)
	if err != nil {
		return time.Time{}, err
	}
	if err := rows.Close(); err != nil {
		return time.Time{}, t.wrap("read the server's clock", err)
	}
	return now, nil
}

// skew returns how far server's clock is from the local readings before
// and after (a clock read around the statement that read server): zero
// when server lies between them, else the difference to the nearer, server
// minus local (negative: the server is behind).
func skew(before, after, server time.Time) time.Duration {
	if after.Before(before) {
		before, after = after, before
	}
	switch {
	case server.Before(before):
		return server.Sub(before)
	case server.After(after):
		return server.Sub(after)
	}
	return 0
}

// checkSkew refuses a catch-up whose caller's clock (read before and after
// the ledger read that also read server's) is more than MaxClockSkew from
// the server's.
func checkSkew(verb, job string, before, after, server time.Time) error {
	d := skew(before, after, server)
	if d >= -MaxClockSkew && d <= MaxClockSkew {
		return nil
	}
	way, by := "behind", d
	if d < 0 {
		way, by = "ahead of", -d
	}
	return fmt.Errorf("ormlock: %s: job %q: this caller's clock (%s) is %v %s the database server's (%s), more than the %v catch-up allows; "+
		"nothing ran, since a slot chosen by a clock that far off may run again after a Prune: correct the clock (NTP), "+
		"see docs/SCHEDULES.md (Clocks of catch-up and Prune)",
		verb, job, after.UTC().Format(time.RFC3339Nano), by.Round(time.Millisecond), way, server.UTC().Format(time.RFC3339Nano), MaxClockSkew)
}
