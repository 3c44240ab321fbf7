package sched

import (
	"fmt"
	"strings"
	"time"

	"github.com/ormlock/ormlock/internal/errs"
)

// Parse reads back the String of a schedule made by Every or Cron
// ("every 1h0m0s in UTC", "0 3 * * * in Europe/Berlin"), as the controls
// table records it (ormlock's RunScheduled): the check that an operator's
// slot is a firing of the job. A cron expression is read with the
// optional seconds field, which reads a five-field one as the standard
// parser does.
func Parse(text string) (Slotter, error) {
	i := strings.LastIndex(text, " in ")
	if i < 0 {
		return nil, fmt.Errorf("%w: schedule %q names no time zone", errs.ErrInvalidArgument, text)
	}
	expr, zone := text[:i], text[i+len(" in "):]
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", errs.ErrInvalidArgument, text, err)
	}
	if d, ok := strings.CutPrefix(expr, "every "); ok {
		p, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("%w: schedule %q: %v", errs.ErrInvalidArgument, text, err)
		}
		return Every("schedule", p, loc)
	}
	return Cron("schedule", expr, loc, true)
}
