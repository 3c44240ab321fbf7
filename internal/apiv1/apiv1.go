// Package apiv1 holds the answers of the web view's JSON API, version 1
// (/api/v1/..., package webui), and of the command's --json output
// (ormlock runs, holder, controls, actions and the action verbs): one
// struct per answer, whose JSON field names are a compatibility promise
// documented in docs/OPERATIONS.md (API). Names are snake_case; times
// are RFC 3339 in UTC (time.Time's JSON form, "Z", with a fraction when
// the time has one); durations are whole milliseconds in fields ending
// in _ms. A field is added in a later version only; none is renamed or
// removed within v1.
//
// The values are the database's, exact (a job name as the ledger holds
// it, so that a script can pass it back), and [Encode] writes them as
// ASCII-only JSON: every character beyond ASCII, DEL and the HTML
// specials <, > and & are \u escapes, so a hostile job name, owner or
// error text (markup, terminal escapes, U+202E) is inert in a browser, a
// log and a terminal, and decodes to the exact value.
package apiv1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/status"
)

// Version is the API's version, the path element after /api/.
const Version = "v1"

// Error is the answer of a request that failed: {"error": "..."}.
type Error struct {
	Error string `json:"error"`
}

// Run is one run of a job, a row of the ledger.
type Run struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	// Slot is the scheduled time the run is for.
	Slot time.Time `json:"slot"`
	// Status is the ledger's: running, done, failed, skipped or rerun.
	Status string `json:"status"`
	// Stale is true for a running row whose lock (or lease) was found
	// free: its owner died or lost the lock before recording the end.
	Stale     bool      `json:"stale"`
	Owner     string    `json:"owner"`
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is null while the run is running (or stale).
	FinishedAt *time.Time `json:"finished_at"`
	// DurationMS is finished_at - started_at, null while running.
	DurationMS *int64 `json:"duration_ms"`
	Error      string `json:"error"`
	// Mechanism is "lease" for a running run that holds a live lease,
	// "" otherwise.
	Mechanism string `json:"mechanism"`
}

// RunList answers GET /api/v1/jobs/{job}/runs and ormlock runs --json.
type RunList struct {
	Job  string `json:"job"`
	Runs []Run  `json:"runs"`
	// Next is the URL of the next (older) page, relative to the page's
	// own URL; absent on the last page. NextBefore is its cursor: the
	// before= it carries (the oldest slot of this page).
	Next       string     `json:"next,omitempty"`
	NextBefore *time.Time `json:"next_before,omitempty"`
}

// Job is one job of the ledger, with its newest run.
type Job struct {
	Name string `json:"name"`
	// LastRun is the run of the job's newest slot.
	LastRun *Run `json:"last_run"`
	// Runs is the URL of the job's runs, relative to /api/v1/jobs.
	Runs string `json:"runs"`
}

// JobList answers GET /api/v1/jobs: the jobs in name order.
type JobList struct {
	Namespace string `json:"namespace"`
	Jobs      []Job  `json:"jobs"`
	// Next is the URL of the next page, relative to this one, and
	// NextAfter its cursor (the after= it carries); absent on the last
	// page.
	Next      string `json:"next,omitempty"`
	NextAfter string `json:"next_after,omitempty"`
}

// Holder says who holds one lock (never the holder's query, which may
// carry secrets).
type Holder struct {
	// Key is the lock's key as the view or the command was given it
	// (ormlock.Key's String).
	Key       string `json:"key"`
	Held      bool   `json:"held"`
	Dialect   string `json:"dialect"`
	Lock      string `json:"lock"`
	Mechanism string `json:"mechanism"`
	Mode      string `json:"mode"`
	// PID is the holder's backend pid (PostgreSQL) or connection id
	// (MySQL/MariaDB); 0 for a lease.
	PID         int64  `json:"pid"`
	Owner       string `json:"owner"`
	User        string `json:"user"`
	Application string `json:"application"`
	ClientAddr  string `json:"client_addr"`
	Database    string `json:"database"`
	State       string `json:"state"`
	StateForMS  int64  `json:"state_for_ms"`
	HeldForMS   int64  `json:"held_for_ms"`
	Waiters     int    `json:"waiters"`
	// Slot is the held slot of a semaphore (ormlock.Semaphore), 0 else.
	Slot int `json:"slot"`
	// Epoch and ExpiresInMS describe a lease (0 otherwise).
	Epoch       int64 `json:"epoch"`
	ExpiresInMS int64 `json:"expires_in_ms"`
	// RunSlot is, for ormlock holder JOB --json of a --once-per job, the
	// slot of the running run whose lock this is; absent otherwise.
	RunSlot *time.Time `json:"run_slot,omitempty"`
}

// HolderList answers GET /api/v1/holders (the view's WithLocks keys) and
// ormlock holder --json.
type HolderList struct {
	Holders []Holder `json:"holders"`
}

// Leader is the holder of a Lead key, with the key's latest fencing
// token (a lease's epoch): null when the key has none.
type Leader struct {
	Holder
	Token *int64 `json:"token"`
}

// LeaderList answers GET /api/v1/leaders (the view's WithLeaders keys).
type LeaderList struct {
	Leaders []Leader `json:"leaders"`
}

// Fence is one fencing counter: its key's text and its latest token.
type Fence struct {
	Key   string `json:"key"`
	Token int64  `json:"token"`
}

// FenceList answers GET /api/v1/fences: the namespace's first counters
// in key order; Truncated when there are more than it lists.
type FenceList struct {
	Namespace string  `json:"namespace"`
	Fences    []Fence `json:"fences"`
	Truncated bool    `json:"truncated"`
}

// Control is a job's row of the controls table.
type Control struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Paused    bool   `json:"paused"`
	// Schedule is the schedule a replica registered, "" if none.
	Schedule  string    `json:"schedule"`
	Author    string    `json:"author"`
	Reason    string    `json:"reason"`
	ChangedAt time.Time `json:"changed_at"`
}

// ControlList answers GET /api/v1/controls and ormlock controls --json.
type ControlList struct {
	Controls []Control `json:"controls"`
}

// Action is one entry of the actions log.
type Action struct {
	ID        int64  `json:"id"`
	Namespace string `json:"namespace"`
	// Kind is pause, resume, skip, rerun or resign.
	Kind string `json:"kind"`
	Job  string `json:"job"`
	// Slot is the slot of a skip or a rerun, null otherwise.
	Slot *time.Time `json:"slot"`
	// Key is a resign's leader key (its text), "" otherwise.
	Key     string    `json:"key"`
	Author  string    `json:"author"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
}

// ActionList answers GET /api/v1/actions and ormlock actions --json,
// newest first.
type ActionList struct {
	Actions []Action `json:"actions"`
}

// ms is d in whole milliseconds.
func ms(d time.Duration) int64 { return d.Milliseconds() }

// utcPtr is t in UTC, or nil when t is zero.
func utcPtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// RunOf is r's answer.
func RunOf(r status.Run) Run {
	out := Run{
		Namespace: r.Namespace, Job: r.Job, Slot: r.Slot.UTC(), Status: r.Status, Stale: r.Stale, Owner: r.Owner,
		StartedAt: r.Started.UTC(), FinishedAt: utcPtr(r.Finished), Error: r.Error, Mechanism: r.Mechanism,
	}
	if out.FinishedAt != nil {
		d := ms(r.Duration)
		out.DurationMS = &d
	}
	return out
}

// RunsOf is rs's answers, never nil (an empty list is [] in JSON).
func RunsOf(rs []status.Run) []Run {
	out := make([]Run, 0, len(rs))
	for _, r := range rs {
		out = append(out, RunOf(r))
	}
	return out
}

// HolderOf is h's answer for the key whose text is key.
func HolderOf(key string, h status.HolderInfo) Holder {
	return Holder{
		Key: key, Held: h.Held, Dialect: h.Dialect, Lock: h.Lock, Mechanism: h.Mechanism, Mode: h.Mode,
		PID: h.PID, Owner: h.Owner, User: h.User, Application: h.Application, ClientAddr: h.ClientAddr,
		Database: h.Database, State: h.State, StateForMS: ms(h.StateFor), HeldForMS: ms(h.HeldFor),
		Waiters: h.Waiters, Slot: h.Slot, Epoch: h.Epoch, ExpiresInMS: ms(h.ExpiresIn),
	}
}

// ControlOf is c's answer.
func ControlOf(c status.JobControl) Control {
	return Control{Namespace: c.Namespace, Job: c.Job, Paused: c.Paused, Schedule: c.Schedule, Author: c.Author, Reason: c.Reason, ChangedAt: c.Changed.UTC()}
}

// ControlsOf is cs's answers, never nil.
func ControlsOf(cs []status.JobControl) []Control {
	out := make([]Control, 0, len(cs))
	for _, c := range cs {
		out = append(out, ControlOf(c))
	}
	return out
}

// ActionOf is a's answer.
func ActionOf(a status.ActionRecord) Action {
	return Action{
		ID: a.ID, Namespace: a.Namespace, Kind: string(a.Kind), Job: a.Job, Slot: utcPtr(a.Slot), Key: a.Key,
		Author: a.Author, Reason: a.Reason, At: a.At.UTC(), Outcome: a.Outcome,
	}
}

// ActionsOf is as's answers, never nil.
func ActionsOf(as []status.ActionRecord) []Action {
	out := make([]Action, 0, len(as))
	for _, a := range as {
		out = append(out, ActionOf(a))
	}
	return out
}

// Marshal returns v as ASCII-only JSON (see the package doc), indented
// by two spaces when indent is set, with a final newline.
func Marshal(v any, indent bool) ([]byte, error) {
	b, err := json.Marshal(v) // escapes <, > and & itself
	if err != nil {
		return nil, fmt.Errorf("ormlock: apiv1: %w", err)
	}
	if indent {
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			return nil, fmt.Errorf("ormlock: apiv1: %w", err)
		}
		b = buf.Bytes()
	}
	return append(ASCII(b), '\n'), nil
}

// Encode writes v to w as Marshal returns it.
func Encode(w io.Writer, v any, indent bool) error {
	b, err := Marshal(v, indent)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ASCII returns b, JSON text, with every character beyond ASCII (and
// DEL) written as a \u escape (a surrogate pair beyond U+FFFF): the same
// JSON value, in ASCII. Such characters occur only inside strings, where
// the escape means the character; invalid UTF-8, which encoding/json
// never writes, becomes U+FFFD.
func ASCII(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf && c != 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		i += n
		if r > 0xFFFF {
			r -= 0x10000
			out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, r)
	}
	return out
}
