package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/ormlock/ormlock"
)

// errStoppedLost is run's error when COMMAND was stopped because the lock
// was lost: the ledger's error text of such a --once-per run.
var errStoppedLost = errors.New("COMMAND stopped: the lock was lost")

// supervisorEnv marks the process as COMMAND's supervisor: ormlock run
// starts its own binary again with it set (see startJob).
const supervisorEnv = "ORMLOCK_SUPERVISOR"

// child is COMMAND: started while the lock is held, sent the signals ormlock
// receives, and stopped, with every process it started, when the lock is
// lost.
type child struct {
	path   string   // resolved executable
	argv   []string // COMMAND [ARGS...], argv[0] as given
	grace  time.Duration
	stderr io.Writer
	idle   string // when a signal ends ormlock: "before COMMAND started" by default

	mu  sync.Mutex
	job *job // set once started

	// Set when ran is true, after COMMAND and its processes exited.
	ran    bool
	status int // exit status, 128+n for a signal n
	killed string
}

// signal forwards s to COMMAND's process group once it runs. Before that,
// ormlock exits at once with 128+n, without starting COMMAND: closing its
// connections makes the server drop the wait or the lock. (Cancelling the
// wait instead would make pgx send a cancel request, and PgBouncer 1.18.0
// crashes when the client that sent one disconnects before PgBouncer has
// forwarded it: pgbouncer issue 801.)
func (c *child) signal(s os.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.job != nil {
		c.job.signal(s)
		return
	}
	n := 2
	if sig, ok := s.(syscall.Signal); ok {
		n = int(sig)
	}
	when := c.idle
	if when == "" {
		when = "before COMMAND started"
	}
	fmt.Fprintf(c.stderr, "ormlock: interrupted by %v %s\n", s, when)
	os.Exit(128 + n) // with c.mu held: COMMAND cannot start now
}

// commandFailed is run's error when COMMAND exited with a non-zero status:
// in --once-per mode it marks the slot failed (retryable).
type commandFailed struct{ status int }

func (e *commandFailed) Error() string { return fmt.Sprintf("COMMAND exited with status %d", e.status) }

// run starts COMMAND with env and waits until it and every process it
// started have exited. When ctx ends with cause ormlock.ErrLockLost, they
// all get SIGTERM, then SIGKILL after the grace period, and run returns
// errStoppedLost. It returns a *commandFailed for a non-zero status, and an
// *exitCode (126/127) when COMMAND cannot start.
func (c *child) run(ctx context.Context, env []string) error {
	if ctx.Err() != nil {
		return context.Cause(ctx) // the lock was lost already
	}
	c.mu.Lock()
	j, err := startJob(c.path, c.argv, env, c.grace)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.job = j
	c.mu.Unlock()

	lost := false
	ctxDo := ctx.Done()
	for {
		select {
		case <-ctxDo:
			ctxDo = nil
			if !errors.Is(context.Cause(ctx), ormlock.ErrLockLost) {
				// Not a loss: the lock is kept until COMMAND exits.
				continue
			}
			lost = true
			fmt.Fprintf(c.stderr, "ormlock: lock lost while COMMAND ran; sending SIGTERM to COMMAND and every process it started (SIGKILL in %v)\n", c.grace)
			j.stop()
		case <-j.done:
			if j.err != nil {
				return j.err
			}
			c.ran, c.status, c.killed = true, j.status, j.killed
			switch {
			case lost:
				// Session and RunOnce report the loss; in --once-per
				// mode this marks the slot failed.
				return errStoppedLost
			case c.status != 0:
				return &commandFailed{status: c.status}
			}
			return nil
		}
	}
}

// how says how COMMAND ended, once ran is true.
func (c *child) how() string {
	if c.killed != "" {
		return fmt.Sprintf("was killed by signal %d (%s)", c.status-128, c.killed)
	}
	return fmt.Sprintf("exited with status %d", c.status)
}

// reset makes c a COMMAND not started, for the next term of ormlock lead:
// a signal ends ormlock again until it starts.
func (c *child) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.job, c.ran, c.status, c.killed = nil, false, 0, ""
}

// startError maps a failed start to a shell's statuses: 127 when COMMAND is
// not found, 126 when it cannot be executed.
func startError(name string, err error) error {
	code := exitCannotExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = exitNotFound
	}
	return &exitCode{code: code, err: fmt.Errorf("cannot run COMMAND %q: %w", name, err)}
}
