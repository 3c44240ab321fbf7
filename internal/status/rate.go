package status

import "time"

// RateUsage is what the rate table shows of a rate limit's tokens:
// ormlock.RateUsage, an alias of this type, documents each field.
type RateUsage struct {
	N        int
	Per      time.Duration
	Used     int
	Free     int
	NextFree time.Time
	Now      time.Time
}
