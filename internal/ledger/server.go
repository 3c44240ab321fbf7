package ledger

import (
	"context"
	"database/sql"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// ledgerServer is the ledger's SQL on one family of servers (postgres.go,
// mysql.go): every statement of the table, and the few flows whose shape
// differs per server (the claim, Migrate's lock, the namespace upgrade).
// NewTable picks it once with lockproto.PerServer; the rest of the
// package calls it and never asks which server it is on.
type ledgerServer interface {
	// createSQL is Table.CreateSQL.
	createSQL(t *Table) string
	// migrate creates and upgrades t while holding op's lock (Migrate).
	migrate(ctx context.Context, db *sql.DB, op *lockproto.Op, t *Table) error
	// timeArg is a slot or started_at as a statement argument.
	timeArg(v time.Time) any
	// claim is Table.claim: with ctl, it reads the job's pause flag too
	// (the controls table exists) and answers errClaimPaused for a slot it
	// would take (pause.go).
	claim(ctx context.Context, t *Table, q lockproto.Querier, ns, job string, slot time.Time, owner string, ctl bool) (time.Time, bool, error)
	// claimText is claim's statement for the message that begins the
	// transaction and takes the lock (lockproto.Op.Then), literals only,
	// affecting one row when the slot is claimed; doneText marks that
	// claim done before COMMIT (lockproto.CommitWith). "" where the lock
	// never travels with BEGIN.
	// With ctl, a paused job's claim raises (ctlServer.pausedErr).
	claimText(t *Table, ns, job string, slot time.Time, owner string, ctl bool) string
	doneText(t *Table, ns, job string, slot time.Time, owner string) string
	// finishSQL marks a claim done or failed (status, error, job, slot,
	// owner, started_at, namespace).
	finishSQL(t *Table) string
	// abandonSQL marks failed a 'running' claim whatever its started_at
	// (error, namespace, job, slot, owner).
	abandonSQL(t *Table) string
	// selectRows is the SELECT of every column of a Row, before its WHERE.
	selectRows(t *Table) string
	// scanRow reads one row of selectRows into r with scan.
	scanRow(scan func(dest ...any) error, r *Row) error
	// runsSQL reads a job's last rows (namespace, job, limit).
	runsSQL(t *Table) string
	// rowSQL reads one row (namespace, job, slot).
	rowSQL(t *Table) string
	// serverNowSQL reads the server's clock; scanTime reads its answer.
	serverNowSQL() string
	scanTime(t *Table, scan func(dest ...any) error) (time.Time, error)
	// takenSQL reads the clock and the taken slots of a job in a range
	// (namespace, job, from, to); scanTaken reads one of its rows into
	// server and, when the row has one, slot.
	takenSQL(t *Table) string
	scanTaken(t *Table, scan func(dest ...any) error, server *time.Time) (slot time.Time, ok bool, err error)
	// pruneFinishedSQL deletes a batch of finished rows (namespace,
	// cutoff, batch).
	pruneFinishedSQL(t *Table) string
	// pruneStaleSQL reads the next 'running' rows before the cutoff
	// (namespace, cutoff, after slot, after job, batch) and deletes one
	// claim (namespace, job, slot, owner, started_at).
	pruneStaleSQL(t *Table) (next, del string)
	// hasIndexSQL counts the btree indexes whose leading columns are
	// (namespace, slot), with its argument; addIndexSQL adds one.
	hasIndexSQL(t *Table) (string, any)
	addIndexSQL(t *Table) string
	// hasNamespaceSQL counts the namespace column, with its argument;
	// addNamespace adds it and makes the primary key (namespace, job,
	// slot) (upgrade.go).
	hasNamespaceSQL(t *Table) (string, any)
	addNamespace(ctx context.Context, t *Table, q lockproto.Querier) error
	// jobs is Table.Jobs, jobsSQL Table.JobsSQL (jobs.go).
	jobs(ctx context.Context, t *Table, q Querier, ns, after string, n int) ([]string, error)
	jobsSQL(t *Table) string
}
