package bench

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/ormlock/ormlock/internal/testdb"
)

// ErrNoRedis is returned by StartRedis when redis-server is not installed.
var ErrNoRedis = errors.New("bench: redis-server not found (install it: apt-get install -y redis-server)")

// RedisServer is a redis-server child process on 127.0.0.1 with no
// persistence, in a temporary directory.
type RedisServer struct {
	Addr    string
	Version string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	err  error
}

// redisBinary finds redis-server on PATH or where Debian installs it.
func redisBinary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", ErrNoRedis
}

// StartRedis starts redis-server on a free loopback port, without
// persistence (no RDB snapshots, no AOF), and waits until it answers PING.
// The caller must Close it; the process is also killed if this one dies.
func StartRedis() (*RedisServer, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		s, err := startRedisOnce(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startRedisOnce(bin string) (*RedisServer, error) {
	port, err := testdb.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ormlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
	var out bytes.Buffer
	s.cmd = exec.Command(bin,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	s.cmd.Stdout, s.cmd.Stderr = &out, &out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("bench: redis-server exited: %v: %s%s", s.err, out.String(), log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			s.Version = parseRedisVersion(info)
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("bench: redis-server on %s not ready: %w", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func parseRedisVersion(info string) string {
	for _, line := range bytes.Split([]byte(info), []byte("\n")) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("redis_version:")); ok {
			return "Redis " + string(v)
		}
	}
	return "Redis"
}

// Close stops the server (SIGTERM, then SIGKILL after 5s) and removes its
// directory. It is idempotent.
func (s *RedisServer) Close() error {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		os.RemoveAll(s.dir)
	})
	return nil
}

// ---- bsm/redislock ----

type redisLock struct {
	c      *redis.Client
	locker *redislock.Client
}

func openRedisLock(_ context.Context, t Target, conns int) (Instance, error) {
	c, err := t.openRedis(conns + 2)
	if err != nil {
		return nil, err
	}
	return &redisLock{c: c, locker: redislock.New(c)}, nil
}

// redisTTL is the lock's TTL: longer than any attempt.
const redisTTL = 30 * time.Second

// Bind obtains the lock with redislock's default (no retry: try once) and
// releases it: two round trips, SET NX PX in a script, then a script that
// deletes the key if it still holds this lock's token.
func (r *redisLock) Bind(key string, crit func()) Attempt {
	locker := r.locker
	return func(ctx context.Context) (bool, error) {
		l, err := locker.Obtain(ctx, key, redisTTL, nil)
		if err != nil {
			if errors.Is(err, redislock.ErrNotObtained) {
				return false, nil
			}
			return false, err
		}
		crit()
		return true, l.Release(context.WithoutCancel(ctx))
	}
}

func (r *redisLock) Hold(ctx context.Context, key string) (func() error, error) {
	l, err := r.locker.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: hold %q on redis: %w", key, err)
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (r *redisLock) Pools() []*sql.DB { return nil }

func (r *redisLock) Close() error { return r.c.Close() }
