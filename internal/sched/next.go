package sched

import "time"

// Next returns the first slot of s after t: the earliest scheduled time
// whose first occurrence is after t. s must be made by Every or Cron.
func Next(s Slotter, t time.Time) time.Time {
	var g grid
	var loc *time.Location
	switch x := s.(type) {
	case *cronSched:
		g, loc = x, x.loc
	case *every:
		g, loc = x, x.loc
	default:
		panic("sched.Next: not an ormlock schedule")
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

// Enumerable reports whether Next can list the slots of s (s is made by
// Every or Cron).
func Enumerable(s Slotter) bool {
	switch s.(type) {
	case *cronSched, *every:
		return true
	}
	return false
}
