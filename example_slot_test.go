package ormlock_test

import (
	"fmt"
	"log"
	"time"

	"github.com/ormlock/ormlock"
)

// Three replicas fire the same midnight job in Berlin, one 300 ms early, one
// on time and one 5 s late (clocks and timers differ by that much). All three
// pass RunOnce the same slot, so exactly one of them runs it.
func ExampleEvery() {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	daily, err := ormlock.Every(24*time.Hour, berlin)
	if err != nil {
		log.Fatal(err)
	}
	midnight := time.Date(2025, 3, 30, 0, 0, 0, 0, berlin) // the day the clocks go forward
	for _, skew := range []time.Duration{-300 * time.Millisecond, 0, 5 * time.Second} {
		fmt.Println(daily.Slot(midnight.Add(skew)))
	}
	// A replica that restarts at 10:00 and catches up still gets today's slot.
	fmt.Println(daily.Slot(midnight.Add(10 * time.Hour)))
	// Output:
	// 2025-03-29 23:00:00 +0000 UTC
	// 2025-03-29 23:00:00 +0000 UTC
	// 2025-03-29 23:00:00 +0000 UTC
	// 2025-03-29 23:00:00 +0000 UTC
}

// A cron expression in a stated time zone: 02:30 every day in New York. On
// the day the clocks go forward, 02:30 does not exist and the slot is the
// moment they jump (03:00 EDT); when they go back, 01:00-01:59 happens twice
// but each scheduled time is one slot.
func ExampleCron() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		log.Fatal(err)
	}
	sched, err := ormlock.Cron("30 2 * * *", ny)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sched.Slot(time.Date(2025, 3, 8, 2, 30, 0, 0, ny)))
	fmt.Println(sched.Slot(time.Date(2025, 3, 9, 3, 0, 0, 0, ny)))
	fmt.Println(sched.Slot(time.Date(2025, 3, 9, 3, 30, 1, 0, ny)))

	_, err = ormlock.Cron("0 0 30 2 *", ny)
	fmt.Println(err)
	// Output:
	// 2025-03-08 07:30:00 +0000 UTC
	// 2025-03-09 07:00:00 +0000 UTC
	// 2025-03-09 07:00:00 +0000 UTC
	// ormlock: invalid argument: ormlock.Cron("0 0 30 2 *"): never fires (no chosen month has the chosen day)
}
