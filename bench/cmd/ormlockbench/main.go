// Command ormlockbench runs the side-by-side lock benchmark of package bench
// on ephemeral servers it starts itself (PostgreSQL, PgBouncer in
// transaction mode in front of it, MariaDB, Redis; all on 127.0.0.1, in
// temporary directories, stopped at the end) and prints one Markdown table.
//
//	make bench
//	cd bench && go run ./cmd/ormlockbench -png ../docs/bench.png
//
// With -link 250us every SQL connection goes through an in-process TCP proxy
// that delays each chunk by 250 µs each way (bench.Link), as over a network,
// and after the per-cell table the command prints the lock-for-free table
// (bench.Free: every adapter against its plain transaction and its
// hand-written protocol, interleaved, with the floor, the load and the CPU
// saturation of each cell, and the allocations per call on loopback).
// -free only prints that table alone (no per-cell table, no chart, no
// Redis); -free off never prints it.
//
// Flags set the measured time per cell, the rounds it is split into, the
// chart's path, and, instead of starting a server, the DSN or address of an
// existing one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/internal/testdb"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ormlockbench:", err)
		os.Exit(1)
	}
}

func run() error {
	cell := flag.Duration("cell", 2*time.Second, "measured time per (database, contender, load) cell")
	rounds := flag.Int("rounds", 6, "interleaved rounds each cell is split into")
	png := flag.String("png", "", "write the chart to this PNG file")
	command := flag.String("command", "", "the command to print with the results (default: this program and its flags)")
	pgDSN := flag.String("postgres", "", "PostgreSQL DSN to use instead of starting a server")
	bouncerDSN := flag.String("pgbouncer", "", "PgBouncer (transaction mode) DSN to use instead of starting one")
	mysqlDSN := flag.String("mariadb", "", "MariaDB DSN (go-sql-driver/mysql) to use instead of starting a server")
	redisAddr := flag.String("redis", "", "Redis host:port to use instead of starting redis-server")
	onlyTargets := flag.String("targets", "", "comma-separated database names to run (default: all), e.g. PostgreSQL,MariaDB+interp")
	onlyContenders := flag.String("contenders", "", "comma-separated substrings of contender names to run (default: all), e.g. gormlock,hand-written")
	link := flag.Duration("link", 0, "route every SQL connection through an in-process TCP proxy that adds this delay each way (e.g. 250us: a simulated network link); 0 is loopback")
	free := flag.String("free", "auto", "the lock-for-free table: auto prints it after the per-cell table when -link is set; only prints it alone; off never")
	freeRounds := flag.Int("free-rounds", 0, "rounds per lock-for-free cell (default 12)")
	freeSteps := flag.Int("free-steps", 0, "iterations per round of a lock-for-free cell (default 40)")
	flag.Parse()
	if *free != "auto" && *free != "only" && *free != "off" {
		return fmt.Errorf("-free %q: want auto, only or off", *free)
	}
	runCells := *free != "only"
	runFree := *free == "only" || (*free == "auto" && *link > 0)
	if *command == "" {
		*command = "go run ./cmd/ormlockbench " + strings.Join(os.Args[1:], " ")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := bench.ThisMachine()

	fmt.Fprintln(os.Stderr, "starting servers ...")
	var (
		mu      sync.Mutex
		errs    []error
		closers []func() error
		wg      sync.WaitGroup
	)
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	// start starts a server on its own goroutine when no flag gave one
	// (*addr is empty) and sets *addr to where it serves.
	start := func(addr *string, boot func() (closeFn func() error, at string, err error)) {
		if *addr != "" {
			return
		}
		wg.Go(func() {
			closeFn, at, err := boot()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			closers = append(closers, closeFn)
			*addr = at
		})
	}
	var backendDSN string // of the PostgreSQL behind a PgBouncer started here
	start(bouncerDSN, func() (func() error, string, error) {
		s, err := testdb.StartServer(testdb.PgBouncer)
		if err != nil {
			return nil, "", err
		}
		backendDSN = s.Backend().DSN()
		return s.Close, s.DSN(), nil
	})
	start(mysqlDSN, func() (func() error, string, error) {
		s, err := testdb.StartServer(testdb.MariaDB)
		if err != nil {
			return nil, "", err
		}
		return s.Close, s.DSN(), nil
	})
	if !runCells {
		*redisAddr = "-" // no Redis contender in the lock-for-free table
	}
	start(redisAddr, func() (func() error, string, error) {
		s, err := bench.StartRedis()
		if err != nil {
			return nil, "", err
		}
		return s.Close, s.Addr, nil
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if *redisAddr == "-" {
		*redisAddr = ""
	}
	if *pgDSN == "" {
		// PostgreSQL direct is the very server behind the PgBouncer.
		*pgDSN = backendDSN
	}

	targets := filter(bench.Targets(*pgDSN, *bouncerDSN, *mysqlDSN, *redisAddr), *onlyTargets,
		func(t bench.Target, f string) bool { return t.Name == f })
	contenders := filter(bench.Contenders(), *onlyContenders,
		func(c bench.Contender, f string) bool { return strings.Contains(c.Name, f) })
	if len(targets) == 0 || len(contenders) == 0 {
		return errors.New("no database or no contender left by -targets / -contenders")
	}
	loopback := slices.Clone(targets)
	if *link > 0 {
		rtt, err := bench.MeasureLinkRTT(*link, 500)
		if err != nil {
			return fmt.Errorf("measure the link: %w", err)
		}
		m.Link = rtt.String()
		links := bench.NewLinks(*link)
		defer links.Close()
		for i := range targets {
			if targets[i], err = links.Route(targets[i]); err != nil {
				return err
			}
		}
	}
	for _, t := range targets {
		v, err := t.ServerVersion(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		m.Servers[t.Name] = v
	}
	m.Servers["pgbouncer"] = bench.PgBouncerVersion()

	var errCells error
	if runCells {
		if errCells = cells(ctx, m, targets, contenders, *cell, *rounds, *png, *command); errCells != nil && !runFree {
			return errCells
		}
	}
	if !runFree {
		return nil
	}
	fmt.Fprintln(os.Stderr, "measuring the lock for free ...")
	fm := m
	fm.Date, fm.LoadBefore = time.Now(), bench.LoadAvg()
	frep, err := bench.Free(ctx, targets, loopback, bench.FreeOptions{Rounds: *freeRounds, Steps: *freeSteps, Progress: os.Stderr})
	if err != nil {
		return errors.Join(errCells, err)
	}
	fm.LoadAfter = bench.LoadAvg()
	fmt.Println()
	frep.Markdown(os.Stdout, fm, *command)
	return errCells
}

// cells measures and prints the per-cell table (and writes its chart).
func cells(ctx context.Context, m bench.Machine, targets []bench.Target, contenders []bench.Contender, cell time.Duration, rounds int, png, command string) error {
	fmt.Fprintln(os.Stderr, "measuring ...")
	rep, err := bench.Run(ctx, targets, contenders, bench.Loads(),
		bench.Options{Cell: cell, Rounds: rounds, Progress: os.Stderr})
	if err != nil {
		return err
	}
	m.LoadAfter = bench.LoadAvg()

	fmt.Println()
	rep.Header(os.Stdout, m, command)
	fmt.Println()
	rep.Table(os.Stdout)
	fmt.Println()
	rep.Checks(os.Stdout)
	if png != "" {
		caption := fmt.Sprintf("%s · %d CPUs %s · load %s → %s · %s",
			m.Date.UTC().Format("2006-01-02"), m.NumCPU, m.CPU, m.LoadBefore, m.LoadAfter, command)
		if err := rep.Chart(png, caption); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "chart written to", png)
	}
	return rep.Err()
}

// filter keeps the items that match one of the comma-separated filters in
// list; an empty list keeps everything.
func filter[T any](items []T, list string, match func(T, string) bool) []T {
	if list == "" {
		return items
	}
	var kept []T
	for _, it := range items {
		for _, f := range strings.Split(list, ",") {
			if f = strings.TrimSpace(f); f != "" && match(it, f) {
				kept = append(kept, it)
				break
			}
		}
	}
	return kept
}
