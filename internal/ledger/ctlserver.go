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
	// rerunsSQL reads the slots of a job marked 'rerun', oldest first
	// (namespace, job, limit); scanSlot reads one.
	rerunsSQL(t *Table) string
	scanSlot(scan func(dest ...any) error) (time.Time, error)
}
