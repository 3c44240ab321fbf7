// Package webui is a small, read-only web view of what ormlock keeps in a
// database: per job, its latest runs as a strip of slots coloured by status
// (done, failed, running, stale, and missed where the job's schedule is
// given) and who runs it now,
// a job's history with a plot of duration per slot, the holders of the
// locks it is told to watch, the leaders of Lead keys with their owner,
// how long they have held the lock and their fencing token, and the fence
// counters. It is the answer to "did last night's run happen, once, where,
// how long did it take, and what failed this week?" and to "who holds this
// lock, who leads, since when?" without SQL.
//
// A service mounts it on its admin mux:
//
//	h, err := webui.Handler(db, webui.WithNamespace("billing"),
//		webui.WithSchedule("nightly-settlement", schedule),
//		webui.WithLeaders(ormlock.Name("billing-leader")))
//	if err != nil {
//		return err
//	}
//	adminMux.Handle("/ormlock/", http.StripPrefix("/ormlock", h))
//
// and `ormlock ui --dsn ...` serves it on 127.0.0.1 from the command line.
// Links are relative, so any prefix works.
//
// # Pages
//
// "/" lists the ledger's jobs, a page of them at a time (?after=JOB), each
// with its latest ?limit= slots (default 20, at most 60), the owner of each
// of its runs that is running now (among those slots; not a stale one),
// and how many of those slots failed and were missed: Failed and Missed
// count the slots of the strip, not the whole ledger. Then come the
// watched locks and leaders and the first fence counters. A job appears
// once it has a row in the ledger, whatever its name (one written by hand
// with a trailing space, or of spaces only, is reached and paged past like
// any other). A 'running' run whose (job, slot) lock is found free is
// shown as stale (ormlock.Run's Stale, read as the verbs' Runs reads it:
// at most 25 look-ups a page, the runs past them shown as running): its
// owner died or lost the lock before recording the end; a later trigger
// of the same slot (a catch-up run, a retry within the slot) takes it
// over, and a schedule that never fires the slot again leaves it until
// Prune deletes it. "/job?name=JOB" shows a
// job's latest ?limit= runs (default 50, at most 500) with the owner, start,
// finish, duration and error of each, and an SVG plot of the durations.
// Every page takes ?tz=Area/City (times are shown in that zone and in UTC;
// the default is UTC or WithTimeZone) and ?refresh=SECONDS (default 30, 0
// for none, at least 5, at most 3600; a plain meta refresh, no script). A
// parameter that does not parse (a zone that does not exist, a limit that is
// not a whole number, a job name that is not UTF-8) is answered 400; a
// whole number out of range, however far, is clamped to the nearest bound
// (?refresh=-5 is 0: no refreshing; ?limit=0 is 1). Every
// page is a plain URL that shows the same view to whoever opens it, so it
// can be pasted into an incident channel. Nothing needs JavaScript.
//
// Rate limits (ormlock.Rate) named with WithRates get a table of their
// tokens: n and per, the tokens used by transactions that committed within
// the last per, the free ones and when the next used one is free again, by
// the database server's clock (a token held by a transaction still open is
// not seen until it commits), and, with WithRefusals, how many takes this
// process saw refused, by key: a [Refusals] given to the verbs as their
// observer counts them (a process's own counts; otelormlock exports a
// fleet's, by key with its WithKeyAttribute).
//
// # JSON API
//
// The same handler answers JSON under /api/v1/ for scripts and
// dashboards: /api/v1/jobs (paged by name, each job with its newest run),
// /api/v1/jobs/{job}/runs (paged by slot: ?limit= and a ?before= cursor,
// with a next link), /api/v1/runs?job= (the same for any name),
// /api/v1/holders, /api/v1/leaders, /api/v1/fences, /api/v1/controls and
// /api/v1/actions?job=. Field names are versioned with the path (snake_case,
// RFC 3339 times in UTC, durations in milliseconds), the JSON is ASCII
// only (every other character a \u escape, so hostile names are inert and
// exact), and the pages' host check, deadline, bounds and read-only rules
// hold, with errors as {"error": "..."}: see docs/OPERATIONS.md (API).
//
// What it cannot show: PostgreSQL advisory keys are hashes and MySQL named
// locks carry no listing that says what they are for, so the view shows
// the holders of the keys it is given (WithLocks, WithLeaders), not of
// every lock held. HolderInfo's fields are shown as they are (its Mode
// column included); its Query is never shown, since a statement can carry
// secrets.
//
// # Safe by construction
//
//   - Read-only: GET and HEAD are the only methods answered (405
//     otherwise; HEAD as GET without the body, for uptime checkers), and
//     every read runs in a read-only READ COMMITTED transaction that is
//     rolled back; the view
//     writes nothing, so a database user with only SELECT on the ledger and
//     fence tables serves it (the tests run it so).
//   - Every value is escaped: job names, owners, error texts and holders'
//     application names are user data. html/template escapes them for
//     their context, and control, bidirectional (U+202E...) and other
//     format characters are shown as \uXXXX escapes, in the SVG plot's
//     texts too.
//   - Content-Security-Policy [ContentSecurityPolicy]: the view's own
//     stylesheet only, no inline style or script, no framing, no form;
//     with X-Content-Type-Options nosniff, Referrer-Policy no-referrer and
//     Cache-Control no-store.
//   - A Host-header allowlist against DNS rebinding: loopback names by
//     default, more with WithAllowedHosts; other hosts get 421.
//   - Bounded: each request has a deadline (WithTimeout, default 5s) that
//     every read observes, at most 4 requests read at once (others wait
//     within their deadline, then get 503), so a slow database pins neither
//     the handlers nor the service's pool; each read is an index range
//     (a page of runs per job; the jobs by a walk of the primary key that
//     reads one entry per job shown, never the whole ledger).
//   - No secret in a page or a log: a failed read shows the server's own
//     error text, or "cannot reach the database server" with no driver
//     text (a failed connection's text names host, user and database).
//   - A hot standby, or any server whose locks exclude nobody, is shown as
//     refused (the library's own server check), not as "no holders".
//
// # Authentication is the embedding service's
//
// The handler checks no credentials: it shows job names, owners, error
// texts, client addresses and database users to whoever reaches it. Mount
// it behind the service's own authentication (see the example with a
// basic-auth wrapper), or reach `ormlock ui` through an SSH tunnel to its
// loopback address.
package webui
