package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// gate returns a file path and a shell test that waits for the file to
// exist, so a COMMAND runs exactly until the test lets it go.
func gate(t *testing.T) (path, waitFor string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "go")
	return path, `while [ ! -e '` + path + `' ]; do sleep 0.05; done`
}

func letGo(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Two runs of one key at once: one runs COMMAND, the other exits with the
// conflict status while the first still runs, without running it.
func TestRunConflict(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := uniq(t, "lock")
		g, waitFor := gate(t)
		script := "echo started; " + waitFor
		a := start(t, k, "run", key, "--", "sh", "-c", script)
		b := start(t, k, "run", key, "--", "sh", "-c", script)
		var loser, winner *proc
		select {
		case <-a.done:
			loser, winner = a, b
		case <-b.done:
			loser, winner = b, a
		case <-time.After(time.Minute):
			t.Fatalf("neither run ended\nA: %s\nB: %s", a.stderr, b.stderr)
		}
		want(t, loser.code, loser.stderr.String(), 75, "lock not acquired", "COMMAND not run")
		if strings.Contains(loser.stdout.String(), "started") {
			t.Errorf("the losing run ran COMMAND")
		}
		winner.waitOutput(t, "started", time.Minute)
		if winner.exited() {
			t.Fatalf("winner exited before its COMMAND was let go: %d %s", winner.code, winner.stderr)
		}
		if testdb.RawFree(t, k, "", key) {
			t.Errorf("lock free while COMMAND runs")
		}
		// --conflict-exit-code, as flock's -E.
		code, out, stderr := runBin(t, k, "run", "--conflict-exit-code", "9", key, "--", "echo", "ran")
		want(t, code, stderr, 9)
		if out != "" {
			t.Errorf("COMMAND ran: %q", out)
		}
		code, _, stderr = runBin(t, k, "run", "--quiet", key, "--", "echo", "ran")
		want(t, code, stderr, 75)
		if stderr != "" {
			t.Errorf("--quiet printed %q", stderr)
		}
		letGo(t, g)
		want(t, winner.wait(t, time.Minute), winner.stderr.String(), 0)
		if !testdb.RawFree(t, k, "", key) {
			t.Errorf("lock still held after the run")
		}
	})
}

// COMMAND's exit status is ormlock's; stdin, stdout and the environment pass
// through; a COMMAND that cannot start gets a shell's statuses.
func TestRunExitStatus(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := uniq(t, "status")
		for _, c := range []struct {
			name string
			cmd  []string
			code int
			msg  string
		}{
			{"ok", []string{"true"}, 0, ""},
			{"fails", []string{"sh", "-c", "exit 3"}, 3, ""},
			{"killed", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
			{"not found", []string{"no-such-command-ormlock"}, 127, "not found"},
			{"not executable", []string{notExec}, 126, "permission denied"},
		} {
			code, _, stderr := runBin(t, k, append([]string{"run", key, "--"}, c.cmd...)...)
			if c.code == 0 && stderr != "" {
				t.Errorf("%s: stderr %q", c.name, stderr)
			}
			want(t, code, stderr, c.code, c.msg)
			if !testdb.RawFree(t, k, "", key) {
				t.Fatalf("%s: lock held after the run", c.name)
			}
		}

		p := startIn(t, k, strings.NewReader("from stdin\n"), "run", "--namespace", "cmdtest", key, "--",
			"sh", "-c", `cat; echo "key=$ORMLOCK_KEY ns=$ORMLOCK_NAMESPACE"; echo to-stderr >&2`)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 0, "to-stderr")
		if got, w := p.stdout.String(), "from stdin\nkey="+key+" ns=cmdtest\n"; got != w {
			t.Errorf("stdout %q, want %q", got, w)
		}
	})
}

// SIGTERM to ormlock reaches COMMAND, and the lock is held until COMMAND
// has exited; a signal before COMMAND starts ends the wait.
func TestRunSignals(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		key := uniq(t, "term")
		g, waitFor := gate(t)
		p := start(t, k, "run", key, "--", "sh", "-c",
			`trap 'echo got-term; `+waitFor+`; exit 7' TERM; echo started; while :; do sleep 0.05; done`)
		p.waitOutput(t, "started", time.Minute)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.waitOutput(t, "got-term", time.Minute)
		if testdb.RawFree(t, k, "", key) {
			t.Errorf("lock released while COMMAND still runs its SIGTERM handler")
		}
		letGo(t, g)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 7)
		if !testdb.RawFree(t, k, "", key) {
			t.Errorf("lock held after COMMAND exited")
		}

		// SIGINT (not from a terminal) is forwarded too.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		c := startWith(t, k, func(c *exec.Cmd) { c.Env = append(c.Env, sigCountEnv+"=1") }, "run", key, "--", self)
		c.waitOutput(t, "started", time.Minute)
		if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		c.waitOutput(t, "int", time.Minute)
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		want(t, c.wait(t, time.Minute), c.stderr.String(), 128+int(syscall.SIGTERM))

		// SIGINT while waiting for a held lock: no COMMAND, 128+2, and
		// no cancel request that would crash PgBouncer 1.18 (the next
		// test on this server would fail).
		release := testdb.RawHold(t, k, "", key)
		w := start(t, k, "run", "--wait", "1m", key, "--", "echo", "ran")
		time.Sleep(500 * time.Millisecond) // into the wait, most likely
		if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		want(t, w.wait(t, 30*time.Second), w.stderr.String(), 128+2)
		if w.stdout.String() != "" {
			t.Errorf("COMMAND ran: %q", w.stdout)
		}
		release()
	})
}

// A lock lost while COMMAND runs (its connection killed) ends COMMAND with
// SIGTERM, then SIGKILL if it ignores that, and ormlock exits 77.
func TestRunLockLost(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		for _, c := range []struct {
			name, script, msg string
		}{
			{"term", `trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done`, "sending SIGTERM"},
			{"kill", `trap '' TERM; echo started; while :; do sleep 0.05; done`, "sending SIGKILL"},
		} {
			key := uniq(t, c.name)
			p := start(t, k, "run", "--keepalive", "200ms", "--grace", "1s", key, "--", "sh", "-c", c.script)
			p.waitOutput(t, "started", time.Minute)
			killHolder(t, k, db, key)
			want(t, p.wait(t, time.Minute), p.stderr.String(), 77, "lock lost", c.msg)
			if c.name == "term" && !strings.Contains(p.stdout.String(), "got-term") {
				t.Errorf("%s: COMMAND did not get SIGTERM: %q", c.name, p.stdout)
			}
			if !testdb.RawFree(t, k, "", key) {
				t.Errorf("%s: lock held after the loss", c.name)
			}
		}
	})
}

// treeScript is a COMMAND that starts two grandchildren and records their
// pids: one backgrounded in COMMAND's process group, one in a session of
// its own (setsid) that ignores SIGTERM, so only SIGKILL ends it. It prints
// "started" once both run, then waits for them (or, with exitFirst, exits
// at once, leaving them running).
func treeScript(dir string, exitFirst bool) string {
	end := "wait"
	if exitFirst {
		end = "exit 0"
	}
	return `echo $$ > ` + dir + `/command
sh -c 'echo $$ > ` + dir + `/bg.tmp; mv ` + dir + `/bg.tmp ` + dir + `/bg; exec sleep 300' &
setsid sh -c 'trap "" TERM; echo $$ > ` + dir + `/sid.tmp; mv ` + dir + `/sid.tmp ` + dir + `/sid; exec sleep 300' &
while [ ! -e ` + dir + `/bg ] || [ ! -e ` + dir + `/sid ]; do sleep 0.02; done
echo started
` + end
}

// treePids reads the pids treeScript recorded (or those of names).
func treePids(t *testing.T, dir string, names ...string) map[string]int {
	t.Helper()
	if len(names) == 0 {
		names = []string{"command", "bg", "sid"}
	}
	pids := map[string]int{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s pid %q: %v", name, b, err)
		}
		pids[name] = pid
	}
	return pids
}

// alive reports whether pid is a live process (not a zombie) running
// COMMAND's shell or its sleep 300, so that a reused pid does not count.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || bytes.HasPrefix(bytes.TrimSpace(stat[i+1:]), []byte("Z")) {
		return false
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return bytes.HasPrefix(cmdline, []byte("sh\x00")) || bytes.Equal(cmdline, []byte("sleep\x00300\x00"))
}

// assertGone fails the test for each of pids still alive after d (0: now).
func assertGone(t *testing.T, pids map[string]int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for name, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("%s (pid %d) survived", name, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Every process COMMAND started, the one in a session of its own included,
// stops on each path: the lock lost, SIGTERM or SIGINT forwarded, ormlock
// killed, and COMMAND exiting first. Except when ormlock is killed, none is
// left when ormlock exits (and so releases the lock).
func TestRunStopsEveryDescendant(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		db := openGorm(t, k)
		t.Run("paths", func(t *testing.T) {
			for _, c := range []struct {
				path string
				code int
				msg  string
			}{
				{"lost", 77, "lock lost"},
				// The group's processes got the forwarded SIGTERM
				// too, and may or may not be gone when COMMAND is.
				{"sigterm", 128 + int(syscall.SIGTERM), "COMMAND exited and left"},
				{"sigint", 128 + int(syscall.SIGINT), "left 2 processes running"},
				{"exits", 0, "left 2 processes running"},
				{"sigkill", 128 + int(syscall.SIGKILL), ""},
			} {
				t.Run(c.path, func(t *testing.T) {
					t.Parallel()
					dir, key := t.TempDir(), uniq(t, c.path)
					// A short keepalive finds the loss soon; elsewhere
					// it could take a slow ping under load for one.
					keepalive := "5s"
					if c.path == "lost" {
						keepalive = "200ms"
					}
					p := start(t, k, "run", "--keepalive", keepalive, "--grace", "500ms", key, "--",
						"sh", "-c", treeScript(dir, c.path == "exits"))
					p.waitOutput(t, "started", time.Minute)
					pids := treePids(t, dir)
					switch c.path {
					case "lost":
						killHolder(t, k, db, key)
					case "sigterm":
						_ = p.cmd.Process.Signal(syscall.SIGTERM)
					case "sigint":
						_ = p.cmd.Process.Signal(syscall.SIGINT)
					case "sigkill":
						_ = p.cmd.Process.Kill()
					}
					want(t, p.wait(t, time.Minute), p.stderr.String(), c.code, c.msg)
					if c.path == "sigkill" {
						assertGone(t, pids, 5*time.Second)
					} else {
						assertGone(t, pids, 0)
						if !strings.Contains(p.stderr.String(), "sending SIGKILL") {
							t.Errorf("no SIGKILL for the process that ignores SIGTERM:\n%s", p.stderr)
						}
					}
					// A killed ormlock cannot release: its server (or PgBouncer,
					// cleaning up the server connection a moment after the
					// client's went) frees the lock, soon but not at once.
					free := testdb.RawFree(t, k, "", key)
					for end := time.Now().Add(5 * time.Second); !free && c.path == "sigkill" && time.Now().Before(end); {
						time.Sleep(50 * time.Millisecond)
						free = testdb.RawFree(t, k, "", key)
					}
					if !free {
						t.Errorf("lock held after the run")
					}
				})
			}
		})
	})
}
