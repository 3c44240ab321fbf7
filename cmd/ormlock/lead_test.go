package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// leadScript is a COMMAND for ormlock lead that records its pid and a
// backgrounded grandchild's in dir, prints "started token=T" (T the term's
// fencing token), and exits 5 once the file dir/go exists.
func leadScript(dir string) string {
	return `rm -f ` + dir + `/command ` + dir + `/bg
echo $$ > ` + dir + `/command
sh -c 'echo $$ > ` + dir + `/bg.tmp; mv ` + dir + `/bg.tmp ` + dir + `/bg; exec sleep 300' &
while [ ! -e ` + dir + `/bg ]; do sleep 0.02; done
echo "started token=$ORMLOCK_FENCING_TOKEN"
while [ ! -e ` + dir + `/go ]; do sleep 0.05; done
exit 5`
}

var startedRE = regexp.MustCompile(`started token=(\d+)`)

// terms returns the fencing tokens of the terms p's COMMAND started.
func terms(p *proc) []int64 {
	var tokens []int64
	for _, m := range startedRE.FindAllStringSubmatch(p.stdout.String(), -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		tokens = append(tokens, n)
	}
	return tokens
}

// waitTerms waits up to a minute until one of ps has started n terms, and
// returns it.
func waitTerms(t *testing.T, n int, ps ...*proc) *proc {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, p := range ps {
			if len(terms(p)) >= n {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range ps {
		t.Logf("ormlock %q exited=%v\nstdout: %s\nstderr: %s", p.cmd.Args[1:], p.exited(), p.stdout, p.stderr)
	}
	t.Fatalf("no ormlock lead started term %d", n)
	return nil
}

// Two ormlock lead on one key: one runs COMMAND; its lock connection killed,
// its COMMAND's tree stops and the other leads, with a greater fencing
// token; COMMAND exiting by itself ends ormlock lead with its status, and
// the deposed one, elected again, stops its tree and releases on SIGTERM.
func TestLead(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		db := openGorm(t, k)
		key, table := uniq(t, "lead"), ledgerTable(t, k)
		code, _, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		dirs := [2]string{t.TempDir(), t.TempDir()}
		var ps [2]*proc
		for i, dir := range dirs {
			ps[i] = start(t, k, "lead", "--keepalive", "200ms", "--grace", "500ms", "--fencing", "--ledger-table", table,
				"--owner", fmt.Sprintf("replica-%d", i), key, "--", "sh", "-c", leadScript(dir))
		}
		first := waitTerms(t, 1, ps[0], ps[1])
		i := 0
		if first == ps[1] {
			i = 1
		}
		leader, other := ps[i], ps[1-i]
		if n := len(terms(other)); n != 0 {
			t.Fatalf("both lead: %d terms on the other", n)
		}
		code, out, stderr := runBin(t, k, "holder", "--ledger-table", table, key)
		want(t, code, stderr, 0)
		// owner= on every server (on PostgreSQL the owner is the
		// application_name, not printed twice)
		if w := fmt.Sprintf(" owner=replica-%d ", i); !strings.Contains(out, w) || strings.Contains(out, "application=") {
			t.Errorf("holder %q does not say %s", out, w)
		}

		// A third one, campaigning, ends at once on SIGINT (128+2)
		// without running COMMAND.
		c := start(t, k, "lead", key, "--", "echo", "ran")
		time.Sleep(300 * time.Millisecond) // into the campaign, most likely
		if err := c.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		want(t, c.wait(t, time.Minute), c.stderr.String(), 128+2)
		if c.stdout.String() != "" {
			t.Errorf("COMMAND ran: %q", c.stdout)
		}

		// The leader's lock connection killed: its COMMAND and the
		// backgrounded grandchild stop, the other one leads.
		pids := treePids(t, dirs[i], "command", "bg")
		killHolder(t, k, db, key)
		waitTerms(t, 1, other)
		assertGone(t, pids, time.Minute)
		if t1, t2 := terms(leader)[0], terms(other)[0]; t2 <= t1 {
			t.Errorf("fencing tokens: first term %d, second %d", t1, t2)
		}
		for deadline := time.Now().Add(time.Minute); !strings.Contains(leader.stderr.String(), "campaigning again"); time.Sleep(20 * time.Millisecond) {
			if leader.exited() || time.Now().After(deadline) {
				t.Fatalf("the deposed one does not campaign again (exited=%v):\n%s", leader.exited(), leader.stderr)
			}
		}

		// COMMAND ends by itself: ormlock lead exits with its status,
		// its grandchild stopped, and the deposed one leads again.
		pids = treePids(t, dirs[1-i], "command", "bg")
		letGo(t, filepath.Join(dirs[1-i], "go"))
		want(t, other.wait(t, time.Minute), other.stderr.String(), 5)
		assertGone(t, pids, 0)
		waitTerms(t, 2, leader)
		if t2, t3 := terms(other)[0], terms(leader)[1]; t3 <= t2 {
			t.Errorf("fencing tokens: second term %d, third %d", t2, t3)
		}

		// SIGTERM to ormlock lead stops COMMAND's tree and releases.
		pids = treePids(t, dirs[i], "command", "bg")
		if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		want(t, leader.wait(t, time.Minute), leader.stderr.String(), 128+int(syscall.SIGTERM))
		assertGone(t, pids, 0)
		if !testdb.RawFree(t, k, "", key) {
			t.Errorf("lock held after ormlock lead exited")
		}
	})
}

var heldForRE = regexp.MustCompile(` held_for=(\S+)`)

// ormlock holder shows a leader's held_for from its election, not from the
// start of its campaign's transaction: a campaign that waited over a second
// for the lock shows no more than the time since it began to lead.
func TestHolderHeldForOfALeader(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.PgBouncer} {
		t.Run(string(k), func(t *testing.T) {
			key := uniq(t, "lead")
			g, waitFor := gate(t)
			a := start(t, k, "run", key, "--", "sh", "-c", "echo started; "+waitFor)
			a.waitOutput(t, "started", time.Minute)
			dir := t.TempDir()
			l := start(t, k, "lead", key, "--", "sh", "-c", leadScript(dir))
			time.Sleep(2 * time.Second) // the campaign waits on the server
			letGo(t, g)
			want(t, a.wait(t, time.Minute), a.stderr.String(), 0)
			l.waitOutput(t, "started token=", time.Minute)
			elected := time.Now()
			code, out, stderr := runBin(t, k, "holder", key)
			since := time.Since(elected)
			want(t, code, stderr, 0)
			m := heldForRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("holder of the leader: %q", out)
			}
			d, err := time.ParseDuration(m[1])
			if err != nil {
				t.Fatal(err)
			}
			if d > since+time.Second {
				t.Errorf("held_for=%v within %v of the election, after a campaign of over 2s: %s", d, since, out)
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			want(t, l.wait(t, time.Minute), l.stderr.String(), 5)
			testdb.AssertNoLeaks(t, k)
		})
	}
}
