//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// The supervisor's two pipes, as file descriptors 3 and 4. ormlock writes
// control bytes: ctlLost, or ctlSignal and a signal number; end of file
// means ormlock died. The supervisor writes status lines: "started", then
// "exit N" or "signal N", or "error CODE MESSAGE" when COMMAND cannot start.
const (
	ctlLost   = 'L'
	ctlSignal = 'S'
)

// supervisor starts COMMAND in a process group of its own and stops every
// process descended from it: on Linux it is a child subreaper, so the
// processes COMMAND leaves behind, setsid and daemons included, become its
// children, and it finds them all in /proc. It exits only when none is left,
// so ormlock releases the lock only then.
type supervisor struct {
	grace  time.Duration
	status io.Writer

	pid  int // COMMAND's pid, and its process group
	pgrp int // the supervisor's (and ormlock's) process group
	tty  *os.File

	cmdDone  bool
	ws       syscall.WaitStatus
	stopping bool // SIGTERM sent to every process
	killing  bool // SIGKILL sent, and sent again until none is left
}

// supervise is the supervisor's main: args are --grace and COMMAND.
func supervise(args []string) int {
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	ctl, status := os.NewFile(3, "ormlock control"), os.NewFile(4, "ormlock status")
	if len(args) < 3 || ctl == nil || status == nil {
		fmt.Fprintln(os.Stderr, "ormlock: the supervisor of COMMAND is started by ormlock run only")
		return exitUsage
	}
	grace, err := time.ParseDuration(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "ormlock: supervisor: bad grace %q\n", args[0])
		return exitUsage
	}
	// ormlock forwards what COMMAND should get; the supervisor's own copy
	// (a signal to the whole process group) is not acted on. Caught, not
	// ignored, so that COMMAND starts with the default dispositions.
	signal.Notify(make(chan os.Signal, 1), forwarded...)
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)

	s := &supervisor{grace: grace, status: status, pgrp: syscall.Getpgrp()}
	becomeSubreaper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, supervisorEnv+"=") {
			env = append(env, kv)
		}
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	tieToParent(attr)
	if s.tty = controllingTTY(); s.tty != nil {
		if pg, err := tcgetpgrp(s.tty); err == nil && pg == s.pgrp {
			// ormlock's group has the terminal: COMMAND's group gets
			// it, so Ctrl-C and Ctrl-Z reach COMMAND's processes and
			// not ormlock.
			attr.Foreground, attr.Ctty = true, int(s.tty.Fd())
		}
	}
	s.pid, err = syscall.ForkExec(args[1], args[2:], &syscall.ProcAttr{Env: env, Files: []uintptr{0, 1, 2}, Sys: attr})
	if err != nil {
		code := exitCannotExec
		if errors.Is(err, syscall.ENOENT) {
			code = exitNotFound
		}
		fmt.Fprintf(status, "error %d %v\n", code, err)
		return 0
	}
	fmt.Fprintln(status, "started")
	if s.tty != nil {
		ignoreTTOU() // for tcsetpgrp, now that COMMAND has started
	}

	waits := make(chan waitEvent)
	go reap(waits)
	ctlc := make(chan byte)
	go func() {
		defer close(ctlc)
		r := bufio.NewReader(ctl)
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			ctlc <- b
		}
	}()
	var (
		kill <-chan time.Time
		tick *time.Ticker
	)
	tickc := func() <-chan time.Time {
		if tick == nil {
			return nil
		}
		return tick.C
	}
	startKilling := func() {
		if !s.killing {
			s.killing = true
			tick = time.NewTicker(100 * time.Millisecond)
		}
		s.signalAll(syscall.SIGKILL)
	}
	for {
		select {
		case ev, ok := <-waits:
			if !ok {
				waits = nil
				if s.groupAlive() {
					// Not a subreaper (not Linux): the group's
					// processes are not the supervisor's children.
					s.terminate()
					if tick == nil {
						tick = time.NewTicker(100 * time.Millisecond)
					}
					continue
				}
				return s.finish()
			}
			if ev.pid != s.pid {
				continue // a process COMMAND left behind, reaped
			}
			if ev.ws.Stopped() {
				switch ev.ws.StopSignal() {
				case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
					s.suspend()
				}
				continue // a SIGSTOP from kill is not the job's stop
			}
			s.cmdDone, s.ws = true, ev.ws
			// The job is over for the shell: the terminal goes back
			// to ormlock's group before any message is printed.
			s.restoreTTY()
			if !s.stopping {
				if n := len(descendants(os.Getpid())); n > 0 || s.groupAlive() {
					what := fmt.Sprintf("%d processes", n)
					if n == 1 {
						what = "1 process"
					}
					fmt.Fprintf(os.Stderr, "ormlock: COMMAND exited and left %s running; sending SIGTERM (SIGKILL in %v)\n", what, s.grace)
					s.terminate()
					kill = time.After(s.grace)
				}
			}
		case b, ok := <-ctlc:
			switch {
			case !ok:
				// ormlock is gone, and with it the lock.
				ctlc = nil
				startKilling()
			case b == ctlLost:
				if !s.stopping {
					s.terminate()
					kill = time.After(s.grace)
				}
			case b == ctlSignal:
				if n, ok := <-ctlc; ok {
					_ = syscall.Kill(-s.pid, syscall.Signal(n))
				}
			}
		case <-cont:
			s.resume()
		case <-kill:
			kill = nil
			if waits != nil || s.groupAlive() {
				fmt.Fprintf(os.Stderr, "ormlock: COMMAND's processes still running %v after SIGTERM; sending SIGKILL\n", s.grace)
			}
			startKilling()
		case <-tickc():
			if s.killing {
				s.signalAll(syscall.SIGKILL)
			}
			if waits == nil && !s.groupAlive() {
				return s.finish()
			}
		}
	}
}

// finish reports COMMAND's status once no process of it is left.
func (s *supervisor) finish() int {
	s.restoreTTY()
	if s.ws.Signaled() {
		fmt.Fprintf(s.status, "signal %d\n", int(s.ws.Signal()))
	} else {
		fmt.Fprintf(s.status, "exit %d\n", s.ws.ExitStatus())
	}
	return 0
}

// terminate sends SIGTERM to every process of COMMAND (and SIGCONT, so
// that a stopped one gets it).
func (s *supervisor) terminate() {
	s.stopping = true
	s.signalAll(syscall.SIGTERM)
	s.signalAll(syscall.SIGCONT)
}

// signalAll sends sig to COMMAND's process group and to every process
// descended from the supervisor.
func (s *supervisor) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-s.pid, sig)
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// groupAlive reports whether a process of COMMAND's group is left.
func (s *supervisor) groupAlive() bool {
	return syscall.Kill(-s.pid, 0) == nil
}

// suspend follows COMMAND when it stops at the terminal (Ctrl-Z, or
// reading it from the background): the terminal goes back to ormlock's
// group and that group stops too, so the shell sees its job stopped.
func (s *supervisor) suspend() {
	if s.tty == nil {
		return // no terminal, no job control
	}
	if pg, err := tcgetpgrp(s.tty); err == nil && pg == s.pid {
		_ = tcsetpgrp(s.tty, s.pgrp)
	}
	_ = syscall.Kill(0, syscall.SIGTSTP)
}

// resume follows the shell's fg (the terminal given back to ormlock's
// group) or bg: COMMAND's group gets the terminal if ormlock's had it, and
// SIGCONT.
func (s *supervisor) resume() {
	if s.cmdDone {
		return
	}
	if s.tty != nil {
		if pg, err := tcgetpgrp(s.tty); err == nil && pg == s.pgrp {
			_ = tcsetpgrp(s.tty, s.pid)
		}
	}
	_ = syscall.Kill(-s.pid, syscall.SIGCONT)
}

// restoreTTY gives the terminal back to ormlock's group, unless the shell
// took it meanwhile.
func (s *supervisor) restoreTTY() {
	if s.tty == nil {
		return
	}
	if pg, err := tcgetpgrp(s.tty); err == nil && (pg == s.pid || pg == 0) {
		_ = tcsetpgrp(s.tty, s.pgrp)
	}
}

type waitEvent struct {
	pid int
	ws  syscall.WaitStatus
}

// reap waits for every child (COMMAND, and the orphans a subreaper
// inherits) and closes waits when none is left.
func reap(waits chan<- waitEvent) {
	defer close(waits)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: no child left
		}
		waits <- waitEvent{pid: pid, ws: ws}
	}
}
