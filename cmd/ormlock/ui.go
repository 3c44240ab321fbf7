package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/webui"
)

const uiUsage = `Usage: ormlock ui [flags]

Serves the read-only web view of the ledger, the locks and the leaders
(package webui) on --listen, 127.0.0.1:8080 by default: per job its latest
runs as a strip of slots (done, failed, running, stale, missed where
--schedule gives the job's schedule) and who runs it now, each job's history with a plot of durations,
the holders of the --lock keys, the leaders of the --leader keys with their
fencing token, and the fence counters. Times are shown in --tz and UTC;
each page is a URL to paste. Stop it with Ctrl-C (or SIGTERM).

The view has no authentication of its own: anyone who reaches it sees job
names, owners, error texts and the holders' users and client addresses. It
listens on the loopback address unless --listen says otherwise (ormlock
then warns); reach it through an SSH tunnel (ssh -L 8080:127.0.0.1:8080
host), or mount webui.Handler behind your service's own authentication.
A request whose Host header is not a loopback name, the --listen host or an
--allow-host is refused (421), against DNS rebinding.

It only reads, in read-only transactions: a database user with SELECT on the
ledger and fence tables is enough. PostgreSQL advisory keys are hashes, so
it shows the holders of the keys it is given, not of every lock held.

Actions (pause, resume, skip, rerun, resign) are off: ormlock ui has no
source of authors of its own. --actions-author-header NAME turns them on for
a trusted reverse proxy in front of it, which authenticates operators and
sets header NAME to the operator's name on every request it forwards (and
strips it from the client's): each action is taken, and recorded, as that
author; a request without the header changes nothing (403). It is refused
unless --listen is a loopback address, so that only the proxy on the same
host can reach the view and set the header. Each action is confirmed on a
page of its own whose form carries a CSRF token (a key drawn at start, so a
form posts back only to this process); scripts post JSON to
/api/v1/actions with Content-Type: application/json and the header
X-Ormlock-Action: 1 (docs/OPERATIONS.md). The database user then needs to
write the controls table, the actions log and the ledger.

Examples:
  ormlock ui --dsn "$DSN"
  ormlock ui --schedule 'nightly-report=0 2 * * *' --tz Europe/Berlin \
      --leader queue-consumer --lock backup
  ormlock ui --listen 10.0.0.5:8080 --allow-host ops.internal
  ormlock ui --actions-author-header X-Forwarded-User --allow-host ops.internal
`

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func uiCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlagSet("ui", uiUsage, stdout)
	c.register(fs, true)
	listen := fs.fl.String("listen", "127.0.0.1:8080", "serve on `ADDR` (host:port; port 0 picks a free one)")
	tz := fs.fl.String("tz", "UTC", "show times in `ZONE` (and UTC) unless a page's ?tz= says otherwise; the zone of --schedule's cron expressions and days")
	timeout := fs.fl.Duration("timeout", 5*time.Second, "answer a page within `DURATION`, database reads included")
	authorHeader := fs.fl.String("actions-author-header", "", "take actions (pause, resume, skip, rerun, resign) as the author named by header `NAME`, which a trusted reverse proxy on this host sets; only with a loopback --listen")
	var locks, leaders, schedules, hosts repeated
	fs.fl.Var(&locks, "lock", "show the holder of lock `KEY` (repeatable; read as in ormlock run)")
	fs.fl.Var(&leaders, "leader", "show the leader of Lead key `KEY`, with its fencing token (repeatable)")
	fs.fl.Var(&schedules, "schedule", "`JOB=SPEC`: JOB's schedule, a Go duration or a cron expression as --once-per takes, so that missed slots show (repeatable)")
	fs.fl.Var(&hosts, "allow-host", "answer requests for `HOST` too (host or host:port; repeatable)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("ui takes no arguments, got %q", pos)
	}
	// the namespace and the ledger table, checked as every command does
	if _, err := c.options(); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive, got %v", *timeout)
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return usagef("--tz: unknown time zone %q", *tz)
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return usagef("--listen %q: %v (want host:port, e.g. 127.0.0.1:8080)", *listen, err)
	}
	wopts := []webui.Option{webui.WithTimeZone(loc), webui.WithTimeout(*timeout), webui.WithAllowedHosts(hosts...),
		webui.WithLogger(slog.New(slog.NewTextHandler(stderr, nil)))}
	if c.namespace != "" {
		wopts = append(wopts, webui.WithNamespace(c.namespace))
	}
	if c.ledger != "" {
		wopts = append(wopts, webui.WithLedgerTable(c.ledger))
	}
	for _, spec := range []struct {
		flag string
		keys []string
		opt  func(...ormlock.Key) webui.Option
	}{{"--lock", locks, webui.WithLocks}, {"--leader", leaders, webui.WithLeaders}} {
		for _, s := range spec.keys {
			k, err := parseKey(s)
			if err != nil {
				return usagef("%s: %s", spec.flag, bare(err))
			}
			wopts = append(wopts, spec.opt(k))
		}
	}
	for _, s := range schedules {
		job, expr, ok := strings.Cut(s, "=")
		if !ok || job == "" || expr == "" {
			return usagef("--schedule %q: want JOB=SPEC, e.g. nightly-report=24h or 'nightly-report=0 2 * * *'", s)
		}
		sched, err := parseSchedule(expr, *tz)
		if err != nil {
			return usagef("--schedule %q: %s", s, bare(err))
		}
		wopts = append(wopts, webui.WithSchedule(job, sched))
	}
	loopback := isLoopback(host)
	if *authorHeader != "" {
		opt, err := actionsFromHeader(*authorHeader, loopback, *listen)
		if err != nil {
			return err
		}
		wopts = append(wopts, opt)
	}
	if !loopback && host != "" && host != "0.0.0.0" && host != "::" {
		wopts = append(wopts, webui.WithAllowedHosts(host))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, closeDB, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	// the view reads on at most a few connections at once
	sqlDB.SetMaxOpenConns(8)
	sqlDB.SetMaxIdleConns(4)
	h, err := webui.Handler(sqlDB, wopts...)
	if err != nil {
		return usagef("%s", bare(err))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	if !loopback {
		fmt.Fprintf(stderr, "ormlock: warning: --listen %s is not a loopback address: the view has no authentication, and whoever reaches it sees job names, owners, error texts and lock holders\n", *listen)
		if host == "" || host == "0.0.0.0" || host == "::" {
			fmt.Fprintf(stderr, "ormlock: only requests for localhost and the --allow-host names are answered (Host header)\n")
		}
	}
	mode := "read-only"
	if *authorHeader != "" {
		mode = "actions by the author in header " + *authorHeader
	}
	fmt.Fprintf(stdout, "ormlock ui: serving http://%s/ (%s; Ctrl-C stops)\n", ln.Addr(), mode)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: *timeout + 30*time.Second, IdleTimeout: time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// isLoopback reports whether host (of --listen) is a loopback address or
// localhost.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// actionsFromHeader is the view's actions with the author read from
// header name, which a reverse proxy on this host sets: refused unless the
// view listens on loopback only (anyone else could set the header). A
// request must carry the header exactly once.
func actionsFromHeader(name string, loopback bool, listen string) (webui.Option, error) {
	if strings.ContainsAny(name, " \t\r\n:") || http.CanonicalHeaderKey(name) == "" {
		return nil, usagef("--actions-author-header %q is not a header name", name)
	}
	if !loopback {
		return nil, usagef("--actions-author-header needs a loopback --listen (got %s): anyone who reaches the view could set the header and act as anyone", listen)
	}
	return webui.WithActions(func(req *http.Request) (string, error) {
		vs := req.Header.Values(name)
		switch {
		case len(vs) == 0:
			return "", fmt.Errorf("no %s header: the proxy names no author", name)
		case len(vs) > 1:
			return "", fmt.Errorf("%d %s headers: the author is ambiguous", len(vs), name)
		}
		return strings.TrimSpace(vs[0]), nil
	}), nil
}
