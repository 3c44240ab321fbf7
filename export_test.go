package ormlock

import (
	"time"

	"github.com/ormlock/ormlock/internal/sched"
)

// NextSlot returns the first slot of s after t (for the parity tests).
func NextSlot(s Schedule, t time.Time) time.Time { return sched.Next(s, t) }
