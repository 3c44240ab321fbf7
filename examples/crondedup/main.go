// Command crondedup is the use that defines ormlock: three replicas of a
// service run the same "midnight" job, and exactly one of them does the
// work each time.
//
// Three scheduler instances, each with its own connection pool (as separate
// processes would have), fire a job on the same schedule — compressed from
// once a day to once a second, so that a dozen "midnights" pass in a few
// seconds. Their timers do not agree: each fires a little early or late,
// as clocks and schedulers do. Every firing maps its time to the slot it is
// for (ormlock.Every, the scheduled time) and calls RunOnce(job, slot):
// one replica runs the slot, inside one transaction with the slot's ledger
// row; the others skip, because the slot is running elsewhere
// (ErrNotAcquired) or already done (ErrAlreadyDone). It prints who ran each
// slot and who skipped, then a summary checked against the database:
//
//	12 slots, 12 runs, 0 duplicates, 24 skips
//
// With no flags it needs nothing but Go: the database is go-mysql-server's
// in-process MySQL server on a free loopback port, reached through
// go-sql-driver/mysql like any MySQL server (see README.md for what was
// checked). -dsn runs it on a real server instead:
//
//	go run ./crondedup
//	go run ./crondedup -orm ent
//	go run ./crondedup -dsn 'postgres://app:secret@localhost:5432/app'
//	go run ./crondedup -dsn 'app:secret@tcp(127.0.0.1:3306)/app' -slots 5 -period 2s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
)

func main() { demo.Main("crondedup", run) }

// outcome is what one replica's firing of one slot did.
type outcome struct {
	replica int
	round   int
	slot    time.Time
	offset  time.Duration // when it fired, relative to the slot
	err     error         // nil: it ran the slot
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("crondedup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", os.Getenv("ORMLOCK_DSN"), "database: a postgres:// URL or a MySQL/MariaDB DSN (user:pass@tcp(host:port)/db); default $ORMLOCK_DSN, else the embedded MySQL engine")
	orm := fs.String("orm", "gorm", "the ORM the replicas use: gorm or ent")
	slots := fs.Int("slots", 12, "how many scheduled runs (slots) to go through")
	period := fs.Duration("period", time.Second, "the schedule's period, a whole number of seconds up to a minute: the compressed \"midnight\"")
	replicas := fs.Int("replicas", 3, "scheduler instances, each with its own connection pool")
	job := fs.String("job", "midnight-settlement", "the job's name in the RunOnce ledger")
	work := fs.Duration("work", 100*time.Millisecond, "how long a run works, inside its transaction")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *slots < 1:
		return fmt.Errorf("-slots %d: need at least 1", *slots)
	case *replicas < 1 || *replicas > 26:
		return fmt.Errorf("-replicas %d: need 1 to 26", *replicas)
	case *period > time.Minute:
		return fmt.Errorf("-period %v: at most a minute, so that the demo ends soon", *period)
	case *work < 0 || *work > *period/2:
		return fmt.Errorf("-work %v: need 0 to half the period (%v)", *work, *period/2)
	}
	schedule, err := ormlock.Every(*period, time.UTC)
	if err != nil {
		return fmt.Errorf("-period: %w", err)
	}

	where := *dsn
	if *dsn == "" {
		e, err := startEmbedded()
		if err != nil {
			return err
		}
		defer e.Close()
		*dsn = e.DSN()
		where = "the embedded MySQL engine (go-mysql-server, in process) on " + e.Addr()
	} else {
		where = redact(where)
	}

	reps := make([]replica, *replicas)
	names := make([]string, *replicas)
	for i := range reps {
		names[i] = fmt.Sprintf("replica-%c", 'a'+i)
		r, err := openReplica(*orm, *dsn, names[i])
		if err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
		defer r.close()
		reps[i] = r
	}
	// Every replica migrates at start-up, as each would in production;
	// Migrate serializes them with a lock.
	for i, r := range reps {
		if err := r.migrate(ctx); err != nil {
			return fmt.Errorf("%s: migrate: %w", names[i], err)
		}
	}
	fmt.Fprintf(stdout, "crondedup: %d replicas (%s, one pool each) run job %q every %v (a compressed midnight), %d slots\n",
		*replicas, *orm, *job, *period, *slots)
	fmt.Fprintf(stdout, "database: %s\n\n", where)

	// The first slot: the next scheduled time, at least 300 ms away.
	first := time.Now().Truncate(*period).Add(*period)
	if time.Until(first) < 300*time.Millisecond {
		first = first.Add(*period)
	}
	out := make(chan outcome)
	for i, r := range reps {
		go fire(ctx, i, r, *job, schedule, first, *period, *slots, *work, out)
	}

	// Print each round once every replica has fired it.
	var (
		rounds   = make([][]outcome, *slots)
		ranBy    = map[string][]string{} // by slotText
		slotSeen = map[string]bool{}
		runs     int
		skips    int
		failures []error
	)
	for next, pending := 0, *slots**replicas; pending > 0; pending-- {
		var o outcome
		select {
		case o = <-out:
		case <-ctx.Done():
			return ctx.Err()
		}
		rounds[o.round] = append(rounds[o.round], o)
		slotSeen[slotText(o.slot)] = true
		switch {
		case o.err == nil:
			runs++
			ranBy[slotText(o.slot)] = append(ranBy[slotText(o.slot)], names[o.replica])
		case errors.Is(o.err, ormlock.ErrAlreadyDone), errors.Is(o.err, ormlock.ErrNotAcquired):
			skips++
		default:
			failures = append(failures, fmt.Errorf("%s, slot %s: %w", names[o.replica], o.slot.Format(time.TimeOnly), o.err))
		}
		for next < *slots && len(rounds[next]) == *replicas {
			printRound(stdout, rounds[next], names)
			next++
		}
	}

	// Check against the database: one settlement row and one 'done' ledger
	// row per slot.
	slotList := make([]string, 0, len(slotSeen))
	for s := range slotSeen {
		slotList = append(slotList, s)
	}
	sort.Strings(slotList)
	rows, err := reps[0].settlements(ctx, *job, slotList)
	if err != nil {
		return fmt.Errorf("count settlements: %w", err)
	}
	ledger, err := reps[0].runs(ctx, *job, 10*len(slotSeen)+10)
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	done := 0
	for _, r := range ledger {
		if slotSeen[slotText(r.Slot)] && r.Status == "done" {
			done++
		}
	}
	duplicates := 0
	for s := range slotSeen {
		n := max(len(ranBy[s]), rows[s])
		if n > 1 {
			duplicates += n - 1
		}
	}
	if done != len(ranBy) {
		failures = append(failures, fmt.Errorf("the ledger has %d done runs for these slots, the replicas ran %d slots", done, len(ranBy)))
	}
	fmt.Fprintf(stdout, "\n%d slots, %d runs, %d duplicates, %d skips\n", len(slotSeen), runs, duplicates, skips)
	return errors.Join(failures...)
}

// fire is one scheduler instance: it fires at each of the slots from first
// on, a little early or late (its own skew plus some jitter, as clocks and
// timers are), maps the time it fired to a slot with the schedule — as a
// real scheduler would, never trusting its own count — and runs the job for
// that slot.
func fire(ctx context.Context, i int, r replica, job string, schedule ormlock.Schedule, first time.Time, period time.Duration, n int, work time.Duration, out chan<- outcome) {
	// replica-b's timer runs late; replica-c's clock runs ahead, so it often
	// fires before the slot's time (and still counts for that slot)
	skew := []time.Duration{-50 * time.Millisecond, 150 * time.Millisecond, -100 * time.Millisecond}[i%3]
	for round := range n {
		at := first.Add(time.Duration(round)*period + skew + rand.N(200*time.Millisecond))
		select {
		case <-time.After(time.Until(at)):
		case <-ctx.Done():
			return
		}
		now := time.Now()
		slot := schedule.Slot(now)
		err := r.runOnce(ctx, job, slot, work)
		select {
		case out <- outcome{replica: i, round: round, slot: slot, offset: now.Sub(slot), err: err}:
		case <-ctx.Done():
			return
		}
	}
}

// printRound prints one line per slot of the round: who ran it, who skipped
// and why, each with the time it fired relative to the slot.
func printRound(w io.Writer, round []outcome, names []string) {
	sort.Slice(round, func(a, b int) bool { return round[a].offset < round[b].offset })
	bySlot := map[time.Time][]outcome{}
	var slots []time.Time
	for _, o := range round {
		if bySlot[o.slot] == nil {
			slots = append(slots, o.slot)
		}
		bySlot[o.slot] = append(bySlot[o.slot], o)
	}
	sort.Slice(slots, func(a, b int) bool { return slots[a].Before(slots[b]) })
	for _, s := range slots {
		var ran, skipped []string
		for _, o := range bySlot[s] {
			at := fmt.Sprintf("%+.2fs", o.offset.Seconds())
			switch {
			case o.err == nil:
				ran = append(ran, names[o.replica]+" ("+at+")")
			case errors.Is(o.err, ormlock.ErrAlreadyDone):
				skipped = append(skipped, names[o.replica]+" ("+at+", already done)")
			case errors.Is(o.err, ormlock.ErrNotAcquired):
				skipped = append(skipped, names[o.replica]+" ("+at+", running elsewhere)")
			default:
				skipped = append(skipped, names[o.replica]+" ("+at+", error: "+o.err.Error()+")")
			}
		}
		if len(ran) == 0 {
			ran = []string{"nobody"}
		}
		line := fmt.Sprintf("slot %s  ran: %s", s.Format(time.TimeOnly), strings.Join(ran, ", "))
		if len(skipped) > 0 {
			line += "  skipped: " + strings.Join(skipped, ", ")
		}
		fmt.Fprintln(w, line)
	}
}
