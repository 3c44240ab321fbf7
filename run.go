package ormlock

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/keys"
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

// MaxJobLen is the longest RunOnce job name, in characters: the ledger's job
// column is varchar(191), which keeps it within InnoDB's 767-byte index
// limit for utf8mb4 on older row formats (the (namespace, job, slot) key is
// 1,284 bytes, within InnoDB's 3,072-byte limit for a whole key).
const MaxJobLen = 191

// ValidJob returns an error wrapping [ErrInvalidArgument] unless job can name
// a RunOnce job: non-empty valid UTF-8 without NUL bytes, at most [MaxJobLen]
// characters, not ending with a space (MySQL/MariaDB would give it the ledger
// row of the name without the space). RunOnce, RunScheduled and the scheduler
// module return its error; call it to reject a configured job name at
// start-up. See docs/PROTOCOL.md (The verbs on each server, RunOnce).
func ValidJob(job string) error {
	switch {
	case job == "":
		return fmt.Errorf("%w: empty job name", ErrInvalidArgument)
	case !utf8.ValidString(job) || strings.ContainsRune(job, 0):
		return fmt.Errorf("%w: job name %q is not valid UTF-8 without NUL bytes", ErrInvalidArgument, job)
	case strings.HasSuffix(job, " "):
		return fmt.Errorf("%w: job name %q ends with a space, which MySQL/MariaDB ignore when comparing job names (it would share the ledger row of the name without it)", ErrInvalidArgument, job)
	case utf8.RuneCountInString(job) > MaxJobLen:
		return fmt.Errorf("%w: job name is %d characters long, at most %d fit the ledger", ErrInvalidArgument, utf8.RuneCountInString(job), MaxJobLen)
	}
	return nil
}

// RunKey returns the lock key RunOnce takes for (job, slot), in whatever
// namespace the call sets: pass it to gormlock.Holder or entlock.Holder to
// ask who is running a slot right now. Its derivation is part of keyhash
// spec v1 (docs/PROTOCOL.md): replicas running different versions lock the
// same key.
func RunKey(job string, slot time.Time) Key { return keys.RunKey(job, slot) }
