package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/status"
)

// Run is one row of the RunOnce ledger: the audit trail of a (job, slot).
// gormlock.Runs (and its entlock twin) return them.
//
// It is defined once, in internal/status, and named here. Its fields:
//
//	type Run struct {
//		// Namespace is the namespace RunOnce ran in (WithNamespace; "" for
//		// none). It is part of the run's identity: the same job and slot in two
//		// namespaces are two runs.
//		Namespace string
//		// Job is the job name given to RunOnce.
//		Job string
//		// Slot is the scheduled time the run is for, in UTC.
//		Slot time.Time
//		// Status is "running" while a claim-mode run has started and not
//		// finished yet, or when its owner died or lost the lock before it
//		// could record the end (then Stale is true); "done" when the run committed (transactional mode) or fn returned nil
//		// (claim mode), after which RunOnce returns ErrAlreadyDone for the
//		// slot; "failed" when a claim-mode fn returned an error or panicked
//		// (Error holds its text; a later trigger for the same slot retries it:
//		// with a cron schedule, a catch-up run (WithCatchUp) or a firing
//		// repeated within the slot, since the next firing is the next slot's). A failed
//		// transactional run leaves no row: it was rolled back.
//		Status string
//		// Owner is the instance that ran (or runs) it; see WithOwner.
//		Owner string
//		// Started is when the run began, by the database server's clock, in UTC.
//		Started time.Time
//		// Finished is when the run ended, by the database server's clock, in
//		// UTC; zero while Status is running.
//		Finished time.Time
//		// Duration is Finished - Started; zero while running.
//		Duration time.Duration
//		// Error is the text of fn's error (or panic) of a failed claim-mode run,
//		// truncated to a few kilobytes; empty otherwise.
//		Error string
//		// Stale is true for a "running" run whose (job, slot) lock nobody
//		// holds: a claim-mode run holds that lock from before it claims the
//		// row until after it records the end, so its owner died (kill -9, a
//		// reboot, a lost connection) or lost the lock before recording it.
//		// Runs looks the lock up after reading the row and, when it is free,
//		// reads the row again, so a run that recorded its end and then
//		// released its lock is never reported stale. Nothing marks such a row
//		// in the ledger (its status stays "running"): a later trigger of the
//		// same slot takes it over (a catch-up run of WithCatchUp, a retry
//		// within the slot, RunOnce called again with that slot), and Prune
//		// deletes it once its slot is older than Prune's window. A cron
//		// schedule without catch-up never fires a past slot again: such a row
//		// stays stale until Prune deletes it.
//		//
//		// Under a lease (RunOnce WithClaim and WithLease: the run's lock is
//		// the lease of RunKey(job, slot), renewed while fn runs), "its lock
//		// is free" means its lease has expired by the server's clock: a run
//		// whose owner died is stale within the lease's TTL, as one whose
//		// advisory or named lock is free. Runs looks for both locks, so
//		// its options need not say which the run used.
//		Stale bool
//		// Mechanism is the lock a "running", not stale run holds, as
//		// Runs found it: "advisory", "named" or "lease" (as
//		// HolderInfo.Mechanism names them). "" for every other row: the
//		// ledger records no mechanism (no column, so that a ledger table
//		// needs no migration for leases), and a finished or stale run holds
//		// none; nor for the 'running' rows beyond those Runs looks up.
//		Mechanism string
//	}
type Run = status.Run

// RunKey returns the lock key RunOnce takes for (job, slot), in whatever
// namespace the call sets: pass it to gormlock.Holder or entlock.Holder to
// ask who is running a slot right now. Its derivation is part of keyhash
// spec v1 (docs/PROTOCOL.md): replicas running different versions lock the
// same key.
func RunKey(job string, slot time.Time) Key { return keys.RunKey(job, slot) }
