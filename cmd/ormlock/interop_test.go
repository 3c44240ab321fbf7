package main_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// A Go process holding the key (gormlock.Session) excludes the command, and
// a running command excludes gormlock.Session and gormlock.Transaction: the
// same keys, namespaces and numeric forms.
func TestGoAndCommandExcludeEachOther(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := openGorm(t, k)
		for _, c := range []struct {
			name, arg string
			key       ormlock.Key
			opts      []ormlock.Option
			flags     []string
		}{
			{"name", uniq(t, "name"), ormlock.Name(uniq(t, "name")), nil, nil},
			{"namespace", uniq(t, "ns"), ormlock.Name(uniq(t, "ns")), []ormlock.Option{ormlock.WithNamespace("cmdtest")}, []string{"--namespace", "cmdtest"}},
			{"id", "id:987654321012", ormlock.ID(987654321012), nil, nil},
			{"pair", "pair:-7,42", ormlock.Pair(-7, 42), nil, nil},
		} {
			t.Run(c.name, func(t *testing.T) {
				// Go holds it: the command does not run.
				held, stop := make(chan struct{}), make(chan struct{})
				errc := make(chan error, 1)
				go func() {
					errc <- gormlock.Session(db, c.key, func(ctx context.Context) error {
						close(held)
						<-stop
						return nil
					}, c.opts...)
				}()
				select {
				case <-held:
				case err := <-errc:
					t.Fatalf("Session: %v", err)
				}
				code, out, stderr := runBin(t, k, append(append([]string{"run"}, c.flags...), c.arg, "--", "echo", "ran")...)
				want(t, code, stderr, 75, "lock not acquired")
				if out != "" {
					t.Errorf("COMMAND ran while Go held the lock: %q", out)
				}
				close(stop)
				if err := <-errc; err != nil {
					t.Fatalf("Session: %v", err)
				}

				// The command holds it: Go does not get it.
				p := start(t, k, append(append([]string{"run"}, c.flags...), c.arg, "--",
					"sh", "-c", "echo started; exec sleep 60")...)
				p.waitOutput(t, "started", time.Minute)
				err := gormlock.Session(db, c.key, func(context.Context) error {
					t.Errorf("Session ran while the command held the lock")
					return nil
				}, c.opts...)
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("Session: %v, want ErrNotAcquired", err)
				}
				err = gormlock.Transaction(db, c.key, func(*gorm.DB) error {
					t.Errorf("Transaction ran while the command held the lock")
					return nil
				}, c.opts...)
				if !errors.Is(err, ormlock.ErrNotAcquired) {
					t.Errorf("Transaction: %v, want ErrNotAcquired", err)
				}
				h, err := gormlock.Holder(db, c.key, c.opts...)
				if err != nil || !h.Held {
					t.Errorf("Holder: %v, %v", h, err)
				}
				// ormlock holder says the same.
				code, out, stderr = runBin(t, k, append(append([]string{"holder"}, c.flags...), c.arg)...)
				want(t, code, stderr, 0)
				if !strings.HasPrefix(out, "held pid=") {
					t.Errorf("ormlock holder: %q", out)
				}
				if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				want(t, p.wait(t, time.Minute), p.stderr.String(), 128+int(syscall.SIGTERM))
				code, out, stderr = runBin(t, k, append(append([]string{"holder"}, c.flags...), c.arg)...)
				want(t, code, stderr, 0)
				if out != "free\n" {
					t.Errorf("ormlock holder after the run: %q", out)
				}
			})
		}
	})
}
