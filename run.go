package ormlock

import (
	"time"
)

// RunStatus is the state of a (job, slot) in the RunOnce ledger.
type RunStatus string

// The states of a ledger row.
const (
	// RunRunning: a claim-mode run has started and not finished yet, or its
	// owner died before it could record the end. The next trigger that takes
	// the (job, slot) lock takes such a row over.
	RunRunning RunStatus = "running"
	// RunDone: the run committed (transactional mode) or fn returned nil
	// (claim mode). RunOnce returns [ErrAlreadyDone] for this slot from now
	// on.
	RunDone RunStatus = "done"
	// RunFailed: a claim-mode fn returned an error or panicked; Run.Error
	// holds its text. The next trigger retries and takes the row over.
	// (A failed transactional run leaves no row at all: it was rolled back.)
	RunFailed RunStatus = "failed"
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
	// Status is running, done or failed.
	Status RunStatus
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

// RunKeyPrefix starts the name of every RunOnce lock; see [RunKey].
const RunKeyPrefix = "ormlock.runonce:"

// RunKey returns the lock key RunOnce takes for (job, slot): the name
//
//	"ormlock.runonce:" + job + "@" + slot in UTC as 2006-01-02T15:04:05.000000Z
//
// for example "ormlock.runonce:daily-settlement@2025-03-30T22:00:00.000000Z".
// The namespace ([WithNamespace]) applies to it as to any name. The slot is
// truncated to whole microseconds, the precision of the ledger's timestamp
// columns. This derivation is part of the compatibility promise of keyhash
// spec v1: replicas running different versions must lock the same key.
func RunKey(job string, slot time.Time) Key {
	return Name(RunKeyPrefix + job + "@" + NormalizeSlot(slot).Format(runKeyTime))
}

const runKeyTime = "2006-01-02T15:04:05.000000Z"

// NormalizeSlot returns slot as RunOnce stores it: in UTC, truncated to
// whole microseconds, without a monotonic clock reading.
func NormalizeSlot(slot time.Time) time.Time {
	return slot.UTC().Truncate(time.Microsecond)
}
