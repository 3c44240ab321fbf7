package status

import (
	"time"

	"github.com/ormlock/ormlock/internal/keys"
)

// ActionKind names an operator's action: ormlock.ActionKind, an alias of
// this type, documents each.
type ActionKind string

// The actions.
const (
	ActionPause  ActionKind = "pause"
	ActionResume ActionKind = "resume"
	ActionSkip   ActionKind = "skip"
	ActionRerun  ActionKind = "rerun"
	ActionResign ActionKind = "resign"
)

// Action is one operator's action: ormlock.Action, an alias of this type,
// documents each field.
type Action struct {
	Kind     ActionKind
	Job      string
	Slot     time.Time
	Key      keys.Key
	Author   string
	Reason   string
	Cooldown time.Duration
}

// By returns a with its author and reason set.
func (a Action) By(author, reason string) Action {
	a.Author, a.Reason = author, reason
	return a
}

// JobControl is a job's row of the controls table: ormlock.JobControl, an
// alias of this type, documents each field.
type JobControl struct {
	Namespace string
	Job       string
	Paused    bool
	Schedule  string
	Author    string
	Reason    string
	Changed   time.Time
}

// ActionRecord is one row of the actions log: ormlock.ActionRecord, an
// alias of this type, documents each field.
type ActionRecord struct {
	ID        int64
	Namespace string
	Kind      ActionKind
	Job       string
	Slot      time.Time
	Key       string
	Author    string
	Reason    string
	At        time.Time
	Outcome   string
}
