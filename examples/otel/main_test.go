package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// Two rounds of three replicas on every server: the Prometheus output has
// otelormlock's series, one acquisition and two refusals a round.
func TestExportsToPrometheus(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{"-dsn", testdb.DSN(t, k), "-rounds", "2", "-work", "50ms", "-job", "otel-" + string(k)}, &out, &errOut); err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		text := out.String()
		for _, want := range []string{
			`ormlock_lock_attempts_total{`,
			`ormlock_outcome="acquired"`,
			`ormlock_outcome="not_acquired"`,
			`ormlock_lock_acquire_duration_seconds_bucket{`,
			`ormlock_lock_hold_duration_seconds_count{`,
			`# span ormlock.Transaction`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("output lacks %s:\n%s", want, text)
			}
		}
	})
}
