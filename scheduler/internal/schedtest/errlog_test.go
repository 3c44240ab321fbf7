package schedtest_test

import (
	"bytes"
	"context"
	"errors"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// TestDefaultErrorHandlerEscapes: without WithErrorHandler or
// WithCronLogger, a failed run is logged through slog.Default() with a fixed
// message and the error as a quoted attribute, so a job's error text cannot
// forge a second log line or put raw control characters in the log.
func TestDefaultErrorHandlerEscapes(t *testing.T) {
	k := testdb.MariaDB
	db := openGorm(t, k)
	migrate(t, db)
	var buf bytes.Buffer
	flags, out := log.Flags(), log.Writer()
	log.SetOutput(&buf) // slog.Default()'s handler writes through package log
	t.Cleanup(func() { log.SetOutput(out); log.SetFlags(flags) })
	slot := time.Date(2031, 5, 7, 10, 0, 0, 0, time.UTC)
	w, err := scheduler.JobWrapper(gormsched.Backend(db, ormlock.WithOwner("w")), jobName(t), everySecond(t),
		scheduler.WithClock(func() time.Time { return slot }))
	if err != nil {
		t.Fatal(err)
	}
	forged := errors.New("boom\n2031/05/07 10:00:00 INFO all good \x1b[2J\r")
	w(scheduler.JobFunc(func(context.Context) error { return forged })).Run()
	got := strings.TrimSuffix(buf.String(), "\n")
	if strings.ContainsAny(got, "\n\r\x1b") || !strings.Contains(got, "ormlock: scheduler error") || !strings.Contains(got, `boom\n2031`) {
		t.Fatalf("logged %q: want one line, the error escaped in an attribute", buf.String())
	}
}
