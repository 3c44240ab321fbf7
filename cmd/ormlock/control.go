package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/apiv1"
)

// The operators' actions (docs/OPERATIONS.md): ormlock pause, resume,
// skip, rerun and lead resign carry one out with gormlock.Act; ormlock
// controls and actions read the controls table and the actions log.

const actionsNote = `Every action needs an author (--author, default $USER@hostname) and may
give a --reason; both are recorded in the actions log (ormlock actions) with
the time and what the action did. Actions change only ormlock's own tables
(the controls table, the ledger and the actions log, which ormlock migrate
creates): none kills a process, terminates a database backend or releases
a lock another process holds. Every replica must run a version of ormlock
(and of the Go library) that knows these controls, and ormlock migrate must
have run, before a job is paused or a slot skipped: an older replica would
run a skipped slot. See docs/OPERATIONS.md.

--json prints the actions log's entry, as the JSON API's /api/v1/actions
lists it (docs/OPERATIONS.md, API). Exit status 0 when the action was
carried out or was already in effect (its outcome says so), 2 when it is
refused (an unknown job's slot, a slot that is no firing of the job's
recorded schedule, a slot running or done, no author) or the invocation is
wrong, 70 on a database error (no controls table: run ormlock migrate).
`

// actSpec is one action verb of the command.
type actSpec struct {
	name, usage string
	args        []string // the positional arguments' names
	cooldown    bool     // takes --cooldown (lead resign)
	// action builds the action from the positional arguments, read.
	action func(pos []string) (ormlock.Action, error)
}

var actSpecs = map[string]actSpec{
	"pause": {name: "pause", args: []string{"JOB"}, usage: `Usage: ormlock pause [flags] JOB

Pauses JOB on every replica: each slot of JOB that a replica triggers while
it is paused (ormlock run --once-per, RunOnce, RunScheduled, the scheduler's
Locker, Task and JobWrapper) is not run but recorded 'skipped', with the
reason "paused by AUTHOR: REASON", and is never run later, not even by
--catch-up after ormlock resume. A run in progress goes on. Pausing a
paused job changes nothing (its outcome says "already paused").

Examples:
  ormlock pause --reason "incident 42: settlement bank down" nightly-settlement
  ormlock pause --author alice nightly-report --json
`, action: func(pos []string) (ormlock.Action, error) { return ormlock.Pause(pos[0]), nil }},
	"resume": {name: "resume", args: []string{"JOB"}, usage: `Usage: ormlock resume [flags] JOB

Resumes a paused JOB: its next slot runs as usual. The slots that fell while
it was paused stay 'skipped'; run one again with ormlock rerun JOB SLOT.
Resuming a job that is not paused changes nothing ("already running").

Examples:
  ormlock resume --reason "bank back" nightly-settlement
`, action: func(pos []string) (ormlock.Action, error) { return ormlock.Resume(pos[0]), nil }},
	"skip": {name: "skip", args: []string{"JOB", "SLOT"}, usage: `Usage: ormlock skip [flags] JOB SLOT

Records JOB's SLOT 'skipped' with the reason, so that it never runs: not
when a replica triggers it, nor by --catch-up. SLOT is the slot's time in
RFC 3339 (2026-12-01T02:00:00Z, or with an offset), a firing of the job's
schedule when a replica recorded one (RunScheduled, ormlock run --once-per).
A slot that is running or done is refused (exit 2); one already skipped
changes nothing.

Examples:
  ormlock skip --reason "holiday" nightly-report 2026-12-25T02:00:00Z
`, action: func(pos []string) (ormlock.Action, error) {
		slot, err := parseSlot(pos[1])
		return ormlock.Skip(pos[0], slot), err
	}},
	"rerun": {name: "rerun", args: []string{"JOB", "SLOT"}, usage: `Usage: ormlock rerun [flags] JOB SLOT

Asks for JOB's SLOT to run again: a slot that failed, was skipped or was
missed is marked 'rerun' in the ledger, and the next firing of the job on
any replica (RunScheduled, the scheduler's Task and JobWrapper) runs it
once, after its own slot. SLOT is RFC 3339, a firing of the job's recorded
schedule when there is one. A slot that is running or done is refused
(exit 2).

Examples:
  ormlock rerun --reason "bank file arrived late" nightly-settlement 2026-12-03T02:00:00Z
`, action: func(pos []string) (ormlock.Action, error) {
		slot, err := parseSlot(pos[1])
		return ormlock.Rerun(pos[0], slot), err
	}},
	"lead resign": {name: "lead resign", args: []string{"KEY"}, cooldown: true, usage: `Usage: ormlock lead resign [flags] KEY

Asks the current leader of KEY (ormlock lead KEY, gormlock.Lead and its
twins) to step down: within one keepalive interval (one renewal interval of
a lease) the leader's work is cancelled with a cause that says it was asked
to resign (ormlock lead stops COMMAND as on a lost lock), it releases the
lock, and it stays out of the election for --cooldown while another
campaigner takes over. Refused (exit 2) when nobody holds KEY. It never
kills the leader or its connection: a leader of an older version goes on.
KEY reads as in ormlock run (a name, id:N, pair:C,O, name:X).

Examples:
  ormlock lead resign --reason "host db-7 is sick" queue-consumer
  ormlock lead resign --cooldown 5m queue-consumer
`, action: func(pos []string) (ormlock.Action, error) {
		key, err := parseKey(pos[0])
		return ormlock.Resign(key), err
	}},
}

func pauseCmd(args []string, stdout, stderr io.Writer) error {
	return actCmd(actSpecs["pause"], args, stdout, stderr)
}

func resumeCmd(args []string, stdout, stderr io.Writer) error {
	return actCmd(actSpecs["resume"], args, stdout, stderr)
}

func skipCmd(args []string, stdout, stderr io.Writer) error {
	return actCmd(actSpecs["skip"], args, stdout, stderr)
}

func rerunCmd(args []string, stdout, stderr io.Writer) error {
	return actCmd(actSpecs["rerun"], args, stdout, stderr)
}

// isResign reports whether ormlock lead's arguments ask for lead resign
// KEY rather than a campaign: "resign" first and no "--" (a campaign for
// a key named resign is ormlock lead resign -- COMMAND).
func isResign(args []string) bool {
	return len(args) > 0 && args[0] == "resign" && !slices.Contains(args, "--")
}

// parseSlot reads SLOT, RFC 3339.
func parseSlot(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("SLOT %q is not an RFC 3339 time (such as 2026-12-01T02:00:00Z)", s)
	}
	return t.UTC(), nil
}

// defaultAuthor is $USER@hostname (the user's name from the system when
// $USER is unset).
func defaultAuthor() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	if name == "" || host == "" {
		return name + host
	}
	return name + "@" + host
}

// actCmd carries out the action of spec.
func actCmd(spec actSpec, args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet(spec.name, spec.usage+"\n"+actionsNote, stdout)
	c.register(fs, true) // the controls and actions tables are the ledger's
	author := fs.fl.String("author", defaultAuthor(), "who asks, as the actions log records it: `NAME`")
	reason := fs.fl.String("reason", "", "why, as the actions log and the view show it: `TEXT`")
	asJSON := fs.fl.Bool("json", false, "print the actions log's entry as JSON (the API's field names)")
	var cooldown *time.Duration
	if spec.cooldown {
		cooldown = fs.fl.Duration("cooldown", ormlock.DefaultResignCooldown, "the leader stays out of the election for `DURATION`")
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != len(spec.args) {
		return usagef("expected %s, got %d arguments", strings.Join(spec.args, " "), len(pos))
	}
	if strings.TrimSpace(*author) == "" {
		return usagef("--author is empty (and $USER@hostname unknown): every action names its author")
	}
	a, err := spec.action(pos)
	if err != nil {
		return err
	}
	a = a.By(*author, *reason)
	if cooldown != nil {
		if *cooldown < 0 {
			return usagef("--cooldown must not be negative, got %v", *cooldown)
		}
		a.Cooldown = *cooldown
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	return withDB(&c, func(db *gorm.DB) error {
		rec, err := gormlock.Act(db, a, opts...)
		if err != nil {
			return err
		}
		if *asJSON {
			return apiv1.Encode(stdout, apiv1.ActionOf(rec), true)
		}
		fmt.Fprintf(stdout, "%s %s: %s (action %d by %s at %s)\n", rec.Kind, target(rec), rec.Outcome, rec.ID, rec.Author, rec.At.UTC().Format(time.RFC3339))
		return nil
	})
}

// target names what rec acted on: the job (and slot), or the key.
func target(rec ormlock.ActionRecord) string {
	switch {
	case rec.Key != "":
		return rec.Key
	case !rec.Slot.IsZero():
		return rec.Job + " " + rec.Slot.UTC().Format(time.RFC3339Nano)
	}
	return rec.Job
}

const controlsUsage = `Usage: ormlock controls [flags]

Lists the jobs' rows of the controls table (gormlock.Controls) in the
namespace: whether each is paused, by whom, when and why, and the schedule
a replica registered (RunScheduled, ormlock run --once-per). A job no
operator acted on and no replica registered has no row. --json prints the
JSON API's /api/v1/controls answer.

Examples:
  ormlock controls --dsn "$DSN"
  ormlock controls --json | jq -r '.controls[] | select(.paused) | .job'
`

func controlsCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("controls", controlsUsage, stdout)
	c.register(fs, true)
	asJSON := fs.fl.Bool("json", false, "print JSON (the API's field names)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("controls takes no arguments, got %q", pos)
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	return withDB(&c, func(db *gorm.DB) error {
		cs, err := gormlock.Controls(db, opts...)
		if err != nil {
			return err
		}
		if *asJSON {
			return apiv1.Encode(stdout, apiv1.ControlList{Controls: apiv1.ControlsOf(cs)}, true)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tPAUSED\tSCHEDULE\tCHANGED\tAUTHOR\tREASON")
		for _, r := range cs {
			fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%s\n", oneLine(r.Job), r.Paused, orDash(r.Schedule), r.Changed.UTC().Format(time.RFC3339), oneLine(r.Author), oneLine(r.Reason))
		}
		return tw.Flush()
	})
}

const actionsUsage = `Usage: ormlock actions [flags] [JOB]

Lists the actions log (gormlock.Actions), newest first: every pause,
resume, skip, rerun and resign, with its author, reason, time (the
database server's clock) and what it did; JOB's only when JOB is given.
--json prints the JSON API's /api/v1/actions answer.

Examples:
  ormlock actions --dsn "$DSN"
  ormlock actions --limit 100 nightly-settlement
`

func actionsCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("actions", actionsUsage, stdout)
	c.register(fs, true)
	limit := fs.fl.Int("limit", 20, "show at most `N` actions")
	asJSON := fs.fl.Bool("json", false, "print JSON (the API's field names)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("expected at most one JOB, got %d arguments", len(pos))
	}
	if *limit < 1 {
		return usagef("--limit must be positive, got %d", *limit)
	}
	job := strings.Join(pos, "")
	opts, err := c.options()
	if err != nil {
		return err
	}
	return withDB(&c, func(db *gorm.DB) error {
		as, err := gormlock.Actions(db, job, *limit, opts...)
		if err != nil {
			return err
		}
		if *asJSON {
			return apiv1.Encode(stdout, apiv1.ActionList{Actions: apiv1.ActionsOf(as)}, true)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAT\tKIND\tTARGET\tAUTHOR\tREASON\tOUTCOME")
		for _, r := range as {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.At.UTC().Format(time.RFC3339), r.Kind, oneLine(target(r)), oneLine(r.Author), oneLine(r.Reason), oneLine(r.Outcome))
		}
		return tw.Flush()
	})
}

// oneLine is s on one line, for a table cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
