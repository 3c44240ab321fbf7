//go:build !unix

package main

import (
	"os"
	"os/exec"
	"time"
)

// job is COMMAND. Outside Unix ormlock starts it directly: a lost lock
// kills it (no SIGTERM on these systems), and only it.
type job struct {
	proc *os.Process
	done chan struct{}

	status int
	killed string
	err    error
}

func startJob(path string, argv, env []string, grace time.Duration) (*job, error) {
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if err := cmd.Start(); err != nil {
		return nil, startError(argv[0], err)
	}
	j := &job{proc: cmd.Process, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		_ = cmd.Wait()
		j.status = cmd.ProcessState.ExitCode()
	}()
	return j, nil
}

func (j *job) signal(s os.Signal) { _ = j.proc.Signal(s) }

func (j *job) stop() { _ = j.proc.Kill() }

// supervise: no supervisor process outside Unix.
func supervise([]string) int { return exitUsage }
