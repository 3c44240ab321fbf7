package ormlock

import "time"

// NextSlot returns the first slot of s after t (for the parity tests):
// the earliest scheduled time whose first occurrence is after t.
func NextSlot(s Schedule, t time.Time) time.Time {
	var g grid
	var loc *time.Location
	switch x := s.(type) {
	case *cronSched:
		g, loc = x, x.loc
	case *every:
		g, loc = x, x.loc
	default:
		panic("NextSlot: not an ormlock schedule")
	}
	w := wallOf(t, loc)
	for {
		n, ok := g.after(w)
		if !ok {
			return time.Time{}
		}
		if fi := firstInstant(n, loc); fi.After(t) {
			return fi.UTC()
		}
		w = n
	}
}
