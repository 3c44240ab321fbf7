package status

import "time"

// Run is one row of the RunOnce ledger: ormlock.Run, an alias of this type,
// documents each field.
type Run struct {
	Namespace string
	Job       string
	Slot      time.Time
	Status    string
	Owner     string
	Started   time.Time
	Finished  time.Time
	Duration  time.Duration
	Error     string
	Stale     bool
	Mechanism string
}
