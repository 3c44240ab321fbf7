package main_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
	"github.com/ormlock/ormlock/keyhash"
)

// bin is the ormlock binary built by TestMain.
var bin string

// raceFlag is "-race" when the tests run with the race detector, so the
// binary under test is built with it too (see race_test.go).
var raceFlag string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if os.Getenv(sigCountEnv) != "" {
		return countSignals()
	}
	dir, err := os.MkdirTemp("", "ormlock-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "ormlock")
	// go test puts its own go first in the test binary's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "ormlock tests build the binary: %v\n", err)
		return 1
	}
	args := []string{"build", "-o", bin}
	if raceFlag != "" {
		args = append(args, raceFlag)
	}
	out, err := exec.Command(goBin, append(args, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ormlock: %v\n%s", err, out)
		return 1
	}
	return testdb.Main(m)
}

// forEachKind runs f once per real server kind.
func forEachKind(t *testing.T, f func(t *testing.T, k testdb.Kind)) {
	t.Helper()
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			f(t, k)
			testdb.AssertNoLeaks(t, k)
		})
	}
}

// uniq returns a key name of its own for the test and label.
func uniq(t *testing.T, label string) string {
	t.Helper()
	return fmt.Sprintf("cmd-%x-%s", uint64(keyhash.Int64(t.Name())), label)
}

// proc is a running ormlock.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *testdb.SyncBuffer
	done           chan struct{}
	code           int
}

// start runs ormlock with args and ORMLOCK_DSN set to the server of kind k
// (none when k is ""). The process is killed at cleanup if still running.
func start(t *testing.T, k testdb.Kind, args ...string) *proc {
	t.Helper()
	return startIn(t, k, nil, args...)
}

// startIn is start with stdin as ormlock's standard input.
func startIn(t *testing.T, k testdb.Kind, stdin io.Reader, args ...string) *proc {
	t.Helper()
	return startWith(t, k, func(c *exec.Cmd) { c.Stdin = stdin }, args...)
}

// startWith is start with setup applied to the command before it starts.
func startWith(t *testing.T, k testdb.Kind, setup func(*exec.Cmd), args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: &testdb.SyncBuffer{}, stderr: &testdb.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.Env = append(childEnv(), "ORMLOCK_DSN=")
	if k != "" {
		p.cmd.Env = append(p.cmd.Env, "ORMLOCK_DSN="+testdb.DSN(t, k))
	}
	// A session of its own, without a controlling terminal: ormlock
	// must not take over the terminal go test runs in.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if setup != nil {
		setup(p.cmd)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start ormlock: %v", err)
	}
	go func() {
		defer close(p.done)
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// childEnv is the environment of the processes the tests start: the test
// binary's, and with -race no 1 s sleep at each exit (the race detector's
// default, to let other goroutines report; a report is printed and fails
// the run either way).
func childEnv() []string {
	env := os.Environ()
	if raceFlag != "" && os.Getenv("GORACE") == "" {
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return env
}

// wait waits up to d for the process to exit and returns its status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("ormlock %q still running after %v\nstdout: %s\nstderr: %s", p.cmd.Args[1:], d, p.stdout, p.stderr)
	}
	return -1
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitOutput waits up to d for COMMAND's stdout to contain s.
func (p *proc) waitOutput(t *testing.T, s string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(p.stdout.String(), s) {
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("no %q from ormlock %q (exited=%v)\nstdout: %s\nstderr: %s", s, p.cmd.Args[1:], p.exited(), p.stdout, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runBin runs the binary to completion (at most a minute) and returns its
// status, stdout and stderr.
func runBin(t *testing.T, k testdb.Kind, args ...string) (int, string, string) {
	t.Helper()
	p := start(t, k, args...)
	code := p.wait(t, time.Minute)
	return code, p.stdout.String(), p.stderr.String()
}

// want checks an exit status and that stderr contains each of msgs.
func want(t *testing.T, code int, stderr string, wantCode int, msgs ...string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit status %d, want %d; stderr:\n%s", code, wantCode, stderr)
	}
	for _, m := range msgs {
		if !strings.Contains(stderr, m) {
			t.Errorf("stderr does not say %q:\n%s", m, stderr)
		}
	}
}

// openGorm opens a pool of the test's own on the server of kind k and checks
// at cleanup that it leaked nothing.
func openGorm(t *testing.T, k testdb.Kind) *gorm.DB {
	t.Helper()
	db, _ := gormtest.Open(t, k)
	return db
}

// killHolder ends the connection that holds the lock name, as a failover or
// an operator would: pg_terminate_backend on PostgreSQL (behind PgBouncer
// too: the backend PgBouncer uses), KILL CONNECTION on MariaDB.
func killHolder(t *testing.T, k testdb.Kind, db *gorm.DB, name string) {
	t.Helper()
	h, err := gormlock.Holder(db, name)
	if err != nil || !h.Held {
		t.Fatalf("holder of %q: %+v, %v", name, h, err)
	}
	admin := testdb.AdminDB(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if k.Dialect() == "postgres" {
		var ok bool
		if err := admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", h.PID).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d): %v, %v", h.PID, ok, err)
		}
		return
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", h.PID)); err != nil {
		t.Fatalf("KILL CONNECTION %d: %v", h.PID, err)
	}
}

// ledgerTable names a ledger table of the test's own, dropped at cleanup.
func ledgerTable(t *testing.T, k testdb.Kind) string {
	t.Helper()
	name := fmt.Sprintf("runs_%x", uint64(keyhash.Int64(t.Name())))
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// sigCountEnv makes the test binary a COMMAND that prints "int" for each
// SIGINT it gets, and exits 143 on SIGTERM (see countSignals).
const sigCountEnv = "ORMLOCK_TEST_COUNT_SIGNALS"

func countSignals() int {
	c := make(chan os.Signal, 16)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	fmt.Printf("started pid=%d\n", os.Getpid())
	for s := range c {
		if s == syscall.SIGTERM {
			return 128 + int(syscall.SIGTERM)
		}
		fmt.Println("int")
	}
	return 1
}
