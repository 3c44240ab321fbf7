package testdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a running server process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done
}

// startProc starts path with args in dir, stdout and stderr appended to
// logPath, as cred (nil: as ourselves), with env added to its environment.
// The child is SIGKILLed if the test binary dies.
func startProc(path string, args []string, dir, logPath string, cred *syscall.Credential, env ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(childEnv(), env...)
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(path), err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	// Go applies Credential before Pdeathsig in the child, so the parent-death
	// signal survives the change of user.
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}

// childEnv is our environment without variables that would steer the servers
// or their tools elsewhere.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "MYSQL") || strings.HasPrefix(k, "MARIADB") || k == "HOME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runTool runs a one-shot command (initdb, mariadb-install-db) with a timeout,
// its output appended to logPath.
func runTool(timeout time.Duration, path string, args []string, dir, logPath string, cred *syscall.Credential) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	off := fileSize(logPath)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	cmd.SysProcAttr.Setpgid = true // so that the whole tree can be killed on timeout
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s failed: %w; output (%s):\n%s", filepath.Base(path), err, logPath, logHeadTail(logPath, off))
	}
	return nil
}

// stopStep is one signal of a shutdown sequence and how long to wait after it.
type stopStep struct {
	sig   syscall.Signal
	grace time.Duration
}

// stop signals the process step by step until it exits, then SIGKILLs it.
// It returns an error only when SIGKILL was needed.
func (p *proc) stop(steps ...stopStep) error {
	for _, st := range steps {
		select {
		case <-p.done:
			return nil
		default:
		}
		_ = p.cmd.Process.Signal(st.sig)
		select {
		case <-p.done:
			return nil
		case <-time.After(st.grace):
		}
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop in time; killed", filepath.Base(p.cmd.Path))
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// FreePort returns a port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portInUse reports whether the log, from offset on, says the listen address
// was taken.
func portInUse(logPath string, off int64) bool {
	s := strings.ToLower(logTail(logPath, off))
	return strings.Contains(s, "address already in use") || strings.Contains(s, "could not create any tcp/ip sockets")
}

// logTail returns the last lines of the file from offset off on.
func logTail(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	const max = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size()-off > max {
		off = fi.Size() - max
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "(log: " + err.Error() + ")"
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// logHeadTail returns the file from offset off on, or its first and last lines
// when it is long: tools such as mariadb-install-db print the cause first and
// a long boilerplate after it.
func logHeadTail(path string, off int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if off > int64(len(b)) {
		off = 0
	}
	lines := strings.Split(strings.TrimRight(string(b[off:]), "\n"), "\n")
	if len(lines) <= 60 {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:30], "\n") + "\n[...]\n" + strings.Join(lines[len(lines)-30:], "\n")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// credential is the unprivileged user that servers run as when we are root
// (PostgreSQL refuses to run as root, PgBouncer too); nil when not root.
func credential(k Kind) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	names := []string{"postgres", "nobody"}
	if k == MariaDB {
		names = []string{"mysql", "nobody"}
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("testdb: running as root and found no unprivileged user (tried %s) to run %s as", strings.Join(names, ", "), k)
}

const dirPrefix = "ormlock-testdb-"

var cleanStaleOnce sync.Once

// tempDir makes the server's private temp dir, owned by cred's user. Its name
// carries our pid so that dirs left by killed test binaries can be removed.
func tempDir(k Kind, cred *syscall.Credential) (string, error) {
	base := os.TempDir()
	if cred != nil && !traversable(base) {
		base = "/tmp"
	}
	cleanStaleOnce.Do(func() { cleanStale(base) })
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-%s-", dirPrefix, os.Getpid(), k))
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// traversable reports whether every ancestor of dir can be searched by others.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// cleanStale removes temp dirs of test binaries that no longer run.
func cleanStale(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // still running
		}
		os.RemoveAll(filepath.Join(base, e.Name()))
	}
}

// WaitForStop blocks a command that serves a server until it is signalled
// (SIGINT, SIGTERM), its standard input closes, or done (when not nil)
// yields, whose error it returns.
func WaitForStop(done <-chan error) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(stop)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	case err := <-done:
		return err
	}
	return nil
}
