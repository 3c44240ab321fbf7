package main_test

import (
	"fmt"
	"os"
	"os/exec"
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

// Ctrl-C at ormlock's terminal reaches COMMAND once: straight from the
// terminal, not a second time through ormlock. SIGTERM is still forwarded.
func TestRunTerminalCtrlC(t *testing.T) {
	k := testdb.Postgres
	master, slave := openPTY(t)
	key := uniq(t, "tty")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := startWith(t, k, func(c *exec.Cmd) {
		c.Env = append(c.Env, sigCountEnv+"=1")
		c.Stdin = slave
		// A session of its own whose controlling terminal is the pty, as
		// a login shell's: ormlock's group is the foreground group.
		c.SysProcAttr.Setsid, c.SysProcAttr.Setctty, c.SysProcAttr.Ctty = true, true, 0
	}, "run", key, "--", self)
	p.waitOutput(t, "started", time.Minute)
	// Standard signals that arrive together merge into one, which hides
	// some duplicates: press Ctrl-C a few times, apart.
	const presses = 5
	for range presses {
		if _, err := master.Write([]byte{3}); err != nil { // ^C
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	p.waitOutput(t, "int", 30*time.Second)
	time.Sleep(time.Second) // a forwarded duplicate would show by now
	if n := strings.Count(p.stdout.String(), "int"); n > presses {
		t.Errorf("COMMAND got SIGINT %d times for %d Ctrl-C: %q", n, presses, p.stdout)
	}
	if p.exited() {
		t.Fatalf("ormlock exited on Ctrl-C: %d %s", p.code, p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	want(t, p.wait(t, time.Minute), p.stderr.String(), 128+int(syscall.SIGTERM))
	testdb.AssertNoLeaks(t, k)
}
