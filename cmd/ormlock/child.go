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

// child is COMMAND: started while the lock is held, sent the signals ormlock
// receives, and stopped when the lock is lost.
type child struct {
	path   string   // resolved executable
	argv   []string // COMMAND [ARGS...], argv[0] as given
	grace  time.Duration
	stderr io.Writer

	mu   sync.Mutex
	proc *os.Process // set once started

	// Set when ran is true, after COMMAND exited.
	ran    bool
	status int // exit status, 128+n for a signal n
	killed string
}

// signal forwards s to COMMAND once it runs (unless COMMAND got it from the
// terminal already). Before that, ormlock exits at once with 128+n, without
// starting COMMAND: closing its connections makes the server drop the wait
// or the lock. (Cancelling the wait instead would make pgx send a cancel
// request, and PgBouncer 1.18.0 crashes when the client that sent one
// disconnects before PgBouncer has forwarded it: pgbouncer issue 801.)
func (c *child) signal(s os.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		if !fromTerminal(s) {
			_ = c.proc.Signal(s) // os.ErrProcessDone after it exited: nothing to do
		}
		return
	}
	n := 2
	if sig, ok := s.(syscall.Signal); ok {
		n = int(sig)
	}
	fmt.Fprintf(c.stderr, "ormlock: interrupted by %v before COMMAND started\n", s)
	os.Exit(128 + n) // with c.mu held: COMMAND cannot start now
}

// commandFailed is run's error when COMMAND exited with a non-zero status:
// in --once-per mode it marks the slot failed (retryable).
type commandFailed struct{ status int }

func (e *commandFailed) Error() string { return fmt.Sprintf("COMMAND exited with status %d", e.status) }

// run starts COMMAND with env and waits for it. When ctx ends with cause
// ormlock.ErrLockLost, COMMAND gets SIGTERM, then SIGKILL after the grace
// period, and run returns that cause once it has exited. It returns a
// *commandFailed for a non-zero status, and an *exitCode (126/127) when
// COMMAND cannot start.
func (c *child) run(ctx context.Context, env []string) error {
	if ctx.Err() != nil {
		return context.Cause(ctx) // the lock was lost already
	}
	c.mu.Lock()
	cmd := &exec.Cmd{
		Path:   c.path,
		Args:   c.argv,
		Env:    env,
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		return startError(c.argv[0], err)
	}
	c.proc = cmd.Process
	c.mu.Unlock()

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var (
		lost  error
		kill  <-chan time.Time
		ctxDo = ctx.Done()
	)
	for {
		select {
		case <-ctxDo:
			ctxDo = nil
			cause := context.Cause(ctx)
			if !errors.Is(cause, ormlock.ErrLockLost) {
				// Not a loss: the lock is kept until COMMAND exits.
				continue
			}
			lost = cause
			fmt.Fprintf(c.stderr, "ormlock: lock lost while COMMAND ran; sending SIGTERM to pid %d (SIGKILL in %v)\n", cmd.Process.Pid, c.grace)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			kill = time.After(c.grace)
		case <-kill:
			kill = nil
			fmt.Fprintf(c.stderr, "ormlock: COMMAND still running %v after SIGTERM; sending SIGKILL\n", c.grace)
			_ = cmd.Process.Kill()
		case <-done:
			c.ran = true
			c.status, c.killed = waitStatus(cmd.ProcessState)
			switch {
			case lost != nil:
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

// waitStatus returns COMMAND's exit status as a shell reports it (128+n when
// signal n killed it) and the signal's name, if any.
func waitStatus(ps *os.ProcessState) (int, string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal().String()
	}
	return ps.ExitCode(), ""
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
