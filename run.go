package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// Run is one row of the RunOnce ledger: the audit trail of a (job, slot).
// gormlock.Runs (and its entlock twin) return them.
type Run struct {
	// Namespace is the namespace RunOnce ran in ([WithNamespace]; "" for
	// none). It is part of the run's identity: the same job and slot in two
	// namespaces are two runs.
	Namespace string
	// Job is the job name given to RunOnce.
	Job string
	// Slot is the scheduled time the run is for, in UTC.
	Slot time.Time
	// Status is "running" while a claim-mode run has started and not
	// finished yet, or its owner died before it could record the end (the
	// next trigger that takes the (job, slot) lock takes such a row over);
	// "done" when the run committed (transactional mode) or fn returned nil
	// (claim mode), after which RunOnce returns [ErrAlreadyDone] for the
	// slot; "failed" when a claim-mode fn returned an error or panicked
	// (Error holds its text; a later trigger for the same slot retries it:
	// with a cron schedule, a catch-up run ([WithCatchUp]) or a firing
	// repeated within the slot, since the next firing is the next slot's). A failed
	// transactional run leaves no row: it was rolled back.
	Status string
	// Owner is the instance that ran (or runs) it; see [WithOwner].
	Owner string
	// Started is when the run began, by the database server's clock, in UTC.
	Started time.Time
	// Finished is when the run ended, by the database server's clock, in
	// UTC; zero while Status is running.
	Finished time.Time
	// Duration is Finished - Started; zero while running.
	Duration time.Duration
	// Error is the text of fn's error (or panic) of a failed claim-mode run,
	// truncated to a few kilobytes; empty otherwise.
	Error string
}

// RunKey returns the lock key RunOnce takes for (job, slot), in whatever
// namespace the call sets: pass it to gormlock.Holder or entlock.Holder to
// ask who is running a slot right now. Its derivation is part of keyhash
// spec v1 (docs/PROTOCOL.md): replicas running different versions lock the
// same key.
func RunKey(job string, slot time.Time) Key { return Key(keys.RunKey(job, slot)) }
