package main_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

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
