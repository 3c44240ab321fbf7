//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// job is COMMAND's process tree, run by a supervisor process (see
// supervise) so that all of it stops on every path: a lost lock, a
// forwarded signal that ends COMMAND, COMMAND exiting first, and ormlock
// killed.
type job struct {
	cmd  *exec.Cmd
	ctl  *os.File // write end of the supervisor's control pipe
	done chan struct{}

	// Set when done is closed.
	status int // exit status, 128+n for a signal n
	killed string
	err    error // the supervisor failed
}

// startJob starts the supervisor, which starts COMMAND, and returns once
// COMMAND has started; a COMMAND that cannot be executed is a startError.
func startJob(path string, argv, env []string, grace time.Duration) (*job, error) {
	self := "/proc/self/exe" // the running binary, even if replaced on disk since
	if runtime.GOOS != "linux" {
		var err error
		if self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("cannot start COMMAND's supervisor: %w", err)
		}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       self,
		Args:       append([]string{"ormlock-supervisor", grace.String(), path}, argv...),
		Env:        append(env[:len(env):len(env)], supervisorEnv+"=1"),
		Stdin:      os.Stdin,
		Stdout:     os.Stdout,
		Stderr:     os.Stderr,
		ExtraFiles: []*os.File{ctlR, stW},
	}
	err = cmd.Start()
	ctlR.Close()
	stW.Close()
	if err != nil {
		ctlW.Close()
		stR.Close()
		return nil, fmt.Errorf("cannot start COMMAND's supervisor: %w", err)
	}
	j := &job{cmd: cmd, ctl: ctlW, done: make(chan struct{})}
	lines := bufio.NewScanner(stR)
	first := ""
	if lines.Scan() {
		first = lines.Text()
	}
	if first != "started" {
		ctlW.Close()
		stR.Close()
		werr := cmd.Wait()
		if code, msg, ok := strings.Cut(strings.TrimPrefix(first, "error "), " "); ok && strings.HasPrefix(first, "error ") {
			n, _ := strconv.Atoi(code)
			return nil, &exitCode{code: n, err: fmt.Errorf("cannot run COMMAND %q: %s", argv[0], msg)}
		}
		return nil, fmt.Errorf("COMMAND's supervisor failed: %v", werr)
	}
	go func() {
		defer close(j.done)
		// The status line comes once no process of COMMAND is left:
		// ormlock goes on then, without waiting for the supervisor's
		// own exit (which the race detector, for one, delays by 1 s).
		last := ""
		for last == "" && lines.Scan() {
			if t := lines.Text(); strings.HasPrefix(t, "exit ") || strings.HasPrefix(t, "signal ") {
				last = t
			}
		}
		what, n, _ := strings.Cut(last, " ")
		code, cerr := strconv.Atoi(n)
		switch {
		case cerr != nil:
			werr := cmd.Wait()
			j.err = fmt.Errorf("COMMAND's supervisor (pid %d) ended without COMMAND's status: %v", cmd.Process.Pid, werr)
		case what == "signal":
			j.status, j.killed = 128+code, syscall.Signal(code).String()
		default:
			j.status = code
		}
		if cerr == nil {
			go func() { _ = cmd.Wait() }()
		}
		stR.Close()
		ctlW.Close()
	}()
	return j, nil
}

// signal forwards s to COMMAND's process group.
func (j *job) signal(s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		_, _ = j.ctl.Write([]byte{ctlSignal, byte(sig)})
	}
}

// stop sends every process of COMMAND SIGTERM, and SIGKILL after the grace
// period.
func (j *job) stop() { _, _ = j.ctl.Write([]byte{ctlLost}) }
