package main_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ormlock/ormlock/internal/testdb"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	ioctl := func(req uintptr, arg unsafe.Pointer) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), req, uintptr(arg)); errno != 0 {
			t.Fatalf("ioctl %#x on /dev/ptmx: %v", req, errno)
		}
	}
	var unlock int32
	ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	var n uint32
	ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// ormlock run from an interactive shell on a terminal: Ctrl-C reaches
// COMMAND once, straight from the terminal (ormlock is not in the
// terminal's foreground group, so it cannot send it a second time); a
// SIGINT sent to ormlock with kill is forwarded, not dropped; Ctrl-Z stops
// the job and the shell's fg resumes it with the terminal.
func TestRunJobControl(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash for an interactive shell")
	}
	k := testdb.Postgres
	master, slave := openPTY(t)
	key := uniq(t, "tty")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := &testdb.SyncBuffer{}
	go func() { _, _ = io.Copy(out, master) }()
	sh := exec.Command(bash, "--norc", "--noprofile", "-i")
	sh.Env = append(childEnv(), "ORMLOCK_DSN="+testdb.DSN(t, k), sigCountEnv+"=1", "PS1=$ ", "TERM=dumb")
	sh.Stdin, sh.Stdout, sh.Stderr = slave, slave, slave
	// A session of its own whose controlling terminal is the pty, as a
	// login shell's.
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	shDone := make(chan struct{})
	go func() { _ = sh.Wait(); close(shDone) }()
	t.Cleanup(func() { _ = sh.Process.Kill(); <-shDone })
	type_ := func(s string) {
		t.Helper()
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(s string, n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for strings.Count(out.String(), s) < n {
			if time.Now().After(deadline) {
				t.Fatalf("no %d× %q on the terminal:\n%s", n, s, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	type_(bin + " run " + key + " -- " + self + "\n")
	waitFor("started pid=", 1)
	var cmdPid int
	if _, err := fmt.Sscanf(out.String()[strings.Index(out.String(), "started pid="):], "started pid=%d", &cmdPid); err != nil {
		t.Fatal(err)
	}
	ormlockPid := parentOf(t, parentOf(t, cmdPid)) // COMMAND's parent is the supervisor

	const intLine = "int\r\n" // COMMAND's line for each SIGINT
	type_("\x03")             // Ctrl-C
	waitFor(intLine, 1)
	if err := syscall.Kill(ormlockPid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(intLine, 2)

	type_("\x1a") // Ctrl-Z
	waitFor("Stopped", 1)
	type_("fg\n")
	// Ctrl-C only once fg has run: COMMAND running again, its group the
	// terminal's foreground one. The shell echoes "fg" before it reads
	// the newline, and a Ctrl-C meanwhile makes the terminal discard that
	// unread newline: the shell would drop the line, and the job would
	// stay stopped.
	waitForeground(t, cmdPid, out)
	type_("\x03")
	waitFor(intLine, 3)
	if err := syscall.Kill(cmdPid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	type_("echo rc=$?\n") // read by the shell once the job is over
	waitFor("rc=143", 1)
	if n := strings.Count(out.String(), intLine); n != 3 {
		t.Errorf("COMMAND got SIGINT %d times, want 3 (2 Ctrl-C, 1 kill):\n%s", n, out)
	}
	testdb.AssertNoLeaks(t, k)
}

// waitForeground waits until pid runs (is not stopped) and its process
// group is its terminal's foreground one.
func waitForeground(t *testing.T, pid int, out fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		state, pgrp, tpgid := procStat(t, pid)
		if state != "T" && pgrp == tpgid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("COMMAND (pid %d) not back in the foreground after fg: state %s, process group %d, terminal's foreground group %d:\n%s", pid, state, pgrp, tpgid, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procStat returns the state, process group and terminal's foreground
// process group of pid.
func procStat(t *testing.T, pid int) (state string, pgrp, tpgid int) {
	t.Helper()
	f := statFields(t, pid)
	return f[0], statInt(t, f, 2), statInt(t, f, 5)
}

// statFields returns the fields of /proc/PID/stat after pid and (comm):
// state ppid pgrp session tty_nr tpgid ...
func statFields(t *testing.T, pid int) []string {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
}

func statInt(t *testing.T, fields []string, i int) int {
	t.Helper()
	n, err := strconv.Atoi(fields[i])
	if err != nil {
		t.Fatalf("/proc stat field %q: %v", fields[i], err)
	}
	return n
}

// parentOf returns the parent pid of pid.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	return statInt(t, statFields(t, pid), 1)
}
