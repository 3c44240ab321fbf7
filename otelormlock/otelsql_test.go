package otelormlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/XSAM/otelsql"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestQueryNestsKeepaliveDoesNot: with otelsql installed, a query made
// inside fn with fn's context is a child of the ormlock.Session span,
// while the Session's keepalive pings, which run all along fn, are not in
// the caller's trace at all.
func TestQueryNestsKeepaliveDoesNot(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			tel := newTelemetry()
			db, err := otelsql.Open(k.Driver(), testdb.DSN(t, k), otelsql.WithTracerProvider(tel.tp),
				otelsql.WithAttributes(semconv.DBSystemKey.String(k.Dialect())),
				otelsql.WithSpanOptions(otelsql.SpanOptions{DisableErrSkip: true}))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			v := sqlVerbs(db)
			ctx, caller := tel.tp.Tracer("test").Start(context.Background(), "caller")
			const keepalive = 300 * time.Millisecond // a ping's timeout is its interval: not shorter, under load
			if err := v.session(ctx, ormlock.Name("otelsql-"+t.Name()), func(ctx context.Context) error {
				if _, err := db.ExecContext(ctx, "SELECT 2"); err != nil {
					return err
				}
				time.Sleep(4 * keepalive) // the keepalive pings meanwhile
				return nil
			}, tel.opt, ormlock.WithKeepalive(keepalive)); err != nil {
				t.Fatal(err)
			}
			caller.End()
			session := tel.span(t, "ormlock.Session")
			var inFn, pings, pingsInTrace int
			var fnQueryEnd time.Time
			for _, s := range tel.spans.Ended() {
				if statement(s) == "SELECT 2" {
					fnQueryEnd = s.EndTime()
				}
			}
			for _, s := range tel.spans.Ended() {
				stmt := statement(s)
				switch {
				case stmt == "SELECT 2":
					inFn++
					if s.Parent().SpanID() != session.SpanContext().SpanID() {
						t.Errorf("fn's query: parent %v, want the ormlock.Session span %v", s.Parent().SpanID(), session.SpanContext().SpanID())
					}
				case isPing(k, stmt) && s.StartTime().After(fnQueryEnd): // the keepalive's, not the acquisition's check
					pings++
					if s.SpanContext().TraceID() == caller.SpanContext().TraceID() {
						pingsInTrace++
					}
				}
			}
			if inFn == 0 {
				t.Fatal("otelsql recorded no span for fn's query")
			}
			if pings == 0 {
				t.Fatal("otelsql recorded no keepalive ping")
			}
			if pingsInTrace != 0 {
				t.Errorf("%d of %d keepalive pings in the caller's trace", pingsInTrace, pings)
			}
			t.Logf("%d keepalive pings, none under the caller's trace", pings)
		})
	}
}

func statement(s sdktrace.ReadOnlySpan) string {
	for _, a := range s.Attributes() {
		switch a.Key {
		case "db.statement", "db.query.text":
			return a.Value.AsString()
		}
	}
	return ""
}

// isPing reports whether stmt is the Session keepalive's check.
func isPing(k testdb.Kind, stmt string) bool {
	if k.Dialect() == "postgres" {
		return strings.HasPrefix(stmt, "SELECT 1")
	}
	return strings.Contains(stmt, "IS_USED_LOCK")
}
