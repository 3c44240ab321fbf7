package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/status"
)

// ActionKind names an operator's action ([Action]).
type ActionKind = status.ActionKind

// The operators' actions. Each changes only ormlock's own tables (the
// controls table, the ledger and the actions log, which Migrate creates):
// none terminates a database backend or releases another process's lock —
// a lock dies with its holder. See docs/OPERATIONS.md.
const (
	// ActionPause pauses a job: every replica's RunOnce, RunScheduled,
	// scheduler Locker, Task and JobWrapper returns [ErrPaused] for its
	// slots, recording each 'skipped', until it is resumed.
	ActionPause = status.ActionPause
	// ActionResume resumes a paused job; the slots that fell while it was
	// paused stay 'skipped' (catch-up does not run them).
	ActionResume = status.ActionResume
	// ActionSkip records a slot 'skipped' (with the action's reason) so
	// that it never runs: RunOnce of it returns an error wrapping
	// [ErrAlreadyDone], as for a done slot, and catch-up counts it taken.
	// A slot not yet due can be skipped. Refused for a slot 'running' or
	// 'done', and for a slot that is not a firing of the schedule a
	// replica's RunScheduled recorded for the job.
	ActionSkip = status.ActionSkip
	// ActionRerun asks for a 'failed', 'skipped' or missed slot to run
	// again: the slot is marked 'rerun' in the ledger, and the next firing
	// of the job on any replica (RunScheduled, the scheduler's Task and
	// JobWrapper) runs it once, after its own slot (none while the job is
	// paused). Refused for a slot 'running' or 'done', and for a slot that
	// is not a firing of the job's recorded schedule.
	ActionRerun = status.ActionRerun
	// ActionResign asks the current leader of a key ([Lead]) to step
	// down: its fn's ctx is cancelled with a cause wrapping [ErrLockLost]
	// that says so, within one keepalive interval (one renewal interval
	// under [WithLease]), and it stays out of the election for the
	// action's Cooldown ([DefaultResignCooldown] when 0).
	ActionResign = status.ActionResign
)

// DefaultResignCooldown is how long a leader that was asked to resign
// stays out of the election when the action names no Cooldown.
const DefaultResignCooldown = config.DefaultResignCooldown

// Action is an operator's action, which each adapter's Act carries out
// and records in the actions log:
//
//	type Action struct {
//		Kind     ActionKind    // what to do
//		Job      string        // the job (pause, resume, skip, rerun)
//		Slot     time.Time     // the slot (skip, rerun): a firing of the job
//		Key      Key           // the leader's key (resign)
//		Author   string        // who asks: required, at most 255 characters
//		Reason   string        // why: shown in the view and the log
//		Cooldown time.Duration // resign: how long the leader stays out
//	}
//
// Build one with [Pause], [Resume], [Skip], [Rerun] or [Resign] and its
// By method: gormlock.Act(db, ormlock.Pause("nightly").By("alice", "incident 42")).
// It is defined once, in internal/status, and named here.
type Action = status.Action

// JobControl is a job's row of the controls table, as each adapter's
// Controls reads it:
//
//	type JobControl struct {
//		Namespace string
//		Job       string
//		Paused    bool
//		Schedule  string    // the schedule a replica registered (RunScheduled), "" if none
//		Author    string    // who changed it last
//		Reason    string    // why
//		Changed   time.Time // when, by the database server's clock
//	}
type JobControl = status.JobControl

// ActionRecord is one entry of the actions log, as each adapter's Actions
// reads it (newest first):
//
//	type ActionRecord struct {
//		ID        int64
//		Namespace string
//		Kind      ActionKind
//		Job       string
//		Slot      time.Time // zero for pause, resume, resign
//		Key       string    // resign: the key's text (Key.String)
//		Author    string
//		Reason    string
//		At        time.Time // by the database server's clock
//		Outcome   string    // what the action did, e.g. "slot was failed, now rerun"
//	}
type ActionRecord = status.ActionRecord

// Pause is the action that pauses job ([ActionPause]).
func Pause(job string) Action { return Action{Kind: ActionPause, Job: job} }

// Resume is the action that resumes job ([ActionResume]).
func Resume(job string) Action { return Action{Kind: ActionResume, Job: job} }

// Skip is the action that skips job's slot ([ActionSkip]).
func Skip(job string, slot time.Time) Action { return Action{Kind: ActionSkip, Job: job, Slot: slot} }

// Rerun is the action that runs job's slot again ([ActionRerun]).
func Rerun(job string, slot time.Time) Action { return Action{Kind: ActionRerun, Job: job, Slot: slot} }

// Resign is the action that asks the leader of key to step down
// ([ActionResign]).
func Resign[K KeyType](key K) Action {
	return Action{Kind: ActionResign, Key: keys.Of[Key](key)}
}
