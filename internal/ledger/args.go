package ledger

import (
	"fmt"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// The argument checks of RunOnce, Runs and Prune,
// written once for every adapter, so that bad input is refused alike
// everywhere (an error wrapping errs.ErrInvalidArgument that names verb
// and what was wrong) before anything is taken.

// CheckRunOnce checks RunOnce's (and RunScheduled's per-slot) arguments:
// fn (nilFn when it is nil), the job name and the slot.
func CheckRunOnce(verb string, nilFn bool, job string, slot time.Time) error {
	if nilFn {
		return fmt.Errorf("%w: %s: nil fn", errs.ErrInvalidArgument, verb)
	}
	if err := ValidateJob(verb, job); err != nil {
		return err
	}
	return ValidateSlot(verb, slot)
}

// CheckRuns checks Runs' job name and limit, which must be positive.
func CheckRuns(verb, job string, limit int) error {
	if err := ValidateJob(verb, job); err != nil {
		return err
	}
	if limit < 1 {
		return fmt.Errorf("%w: %s: limit must be positive, got %d", errs.ErrInvalidArgument, verb, limit)
	}
	return nil
}

// CheckPrune checks Prune's olderThan, which must be positive (the
// catch-up window it must cover is CheckCatchUp's, once the settings are
// known).
func CheckPrune(verb string, olderThan time.Duration) error {
	if olderThan <= 0 {
		return fmt.Errorf("%w: %s: olderThan must be positive, got %v", errs.ErrInvalidArgument, verb, olderThan)
	}
	return nil
}
