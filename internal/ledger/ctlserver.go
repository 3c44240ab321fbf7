package ledger

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/status"
)

// ctlServer is the SQL of the operators' controls (controls.go, act.go) on
// one family of servers (ctlpostgres.go, ctlmysql.go), picked once by
// NewTable, as ledgerServer is.
type ctlServer interface {
	// probeSQL counts t's controls table, with its argument.
	probeSQL(t *Table) (string, any)
	// narrowChecksSQL lists the names of t's CHECK constraints that test
	// status without 'skipped', with its argument; widenCheckSQL replaces
	// one by schema.StatusList's, under its name.
	narrowChecksSQL(t *Table) (string, any)
	widenCheckSQL(t *Table, name string) []string
	// pausedErr reports whether err is the claim's own "paused" (the
	// PostgreSQL claim raises it; MySQL/MariaDB never).
	pausedErr(err error) bool
	// readControlSQL reads a job's row (namespace, job): paused,
	// schedule, author, reason; the caller may append " FOR UPDATE".
	readControlSQL(t *Table) string
	// setPaused upserts a job's pause flag, changed_at the server's now.
	setPaused(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, paused bool, author, reason string) error
	// slotStatusSQL reads a ledger row's status (namespace, job, slot);
	// the caller may append " FOR UPDATE".
	slotStatusSQL(t *Table) string
	// markSlot inserts the slot's row with status (owner, error text, ""
	// for none: the row's own is kept), or sets its status when the row
	// meets from (a condition on its columns, each qualified "r.").
	markSlot(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, status, owner, errText, from string) error
	// insertAction appends rec to the actions log, setting its ID and At.
	insertAction(ctx context.Context, t *Table, q lockproto.Querier, rec *status.ActionRecord) error
	// controlsSQL reads the jobs' rows of a namespace (namespace, limit);
	// scanControl reads one.
	controlsSQL(t *Table) string
	scanControl(scan func(dest ...any) error, c *status.JobControl) error
	// actionsSQL reads the log of a namespace, newest first (namespace,
	// limit; with byName: namespace, name, limit); scanAction reads one.
	actionsSQL(t *Table, byName bool) string
	scanAction(scan func(dest ...any) error, a *status.ActionRecord) error
	// recordSchedule upserts a job's schedule text.
	recordSchedule(ctx context.Context, t *Table, q lockproto.Querier, ns, job, text string) error
	// askRerun counts one more rerun asked of a job in its controls row
	// (rerun_asked), inserting the row.
	askRerun(ctx context.Context, t *Table, q lockproto.Querier, ns, job string) error
	// rerunsSQL reads, when the job's controls row has reruns asked and
	// not yet seen done (rerun_asked > rerun_seen), its rerun_asked and
	// the slots of the job marked 'rerun', oldest first (none: one row
	// whose slot is NULL); nothing otherwise, without reading the ledger
	// (namespace, job, limit). scanRerun reads one row (ok false: NULL).
	rerunsSQL(t *Table) string
	scanRerun(scan func(dest ...any) error) (asked int64, slot time.Time, ok bool, err error)
	// seenReruns records that every rerun asked up to asked has run
	// (rerun_seen, never moved back).
	seenReruns(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, asked int64) error
}
