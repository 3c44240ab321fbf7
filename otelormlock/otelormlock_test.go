package otelormlock_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/enttest"
	"github.com/ormlock/ormlock/internal/testdb/enttest/ent"
	"github.com/ormlock/ormlock/otelormlock"
	"github.com/ormlock/ormlock/pgxlock"
	"github.com/ormlock/ormlock/sqllock"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// verbs is one adapter's four verbs, each handing fn the context its work
// uses (ent: entlock.Context(tx)).
type verbs struct {
	tx      func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error
	session func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error
	lead    func(ctx context.Context, key string, fn func(context.Context) error, opts ...ormlock.Option) error
	runOnce func(ctx context.Context, job string, slot time.Time, fn func(context.Context) error, opts ...ormlock.Option) error
	migrate func(ctx context.Context, opts ...ormlock.Option) error
}

func sqlVerbs(db *sql.DB) verbs {
	return verbs{
		tx: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return sqllock.Transaction(ctx, db, key, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
		},
		session: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return sqllock.Session(ctx, db, key, fn, opts...)
		},
		lead: func(ctx context.Context, key string, fn func(context.Context) error, opts ...ormlock.Option) error {
			return sqllock.Lead(ctx, db, key, fn, opts...)
		},
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(context.Context) error, opts ...ormlock.Option) error {
			return sqllock.RunOnce(ctx, db, job, slot, func(ctx context.Context, _ *sql.Tx) error { return fn(ctx) }, opts...)
		},
		migrate: func(ctx context.Context, opts ...ormlock.Option) error { return sqllock.Migrate(ctx, db, opts...) },
	}
}

func gormVerbs(t *testing.T, k testdb.Kind, db *sql.DB) verbs {
	var d gorm.Dialector = postgres.New(postgres.Config{Conn: db})
	if k.Dialect() == "mysql" {
		d = mysql.New(mysql.Config{Conn: db, SkipInitializeWithVersion: true})
	}
	g, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	return verbs{
		tx: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return gormlock.Transaction(g.WithContext(ctx), key, func(tx *gorm.DB) error { return fn(tx.Statement.Context) }, opts...)
		},
		session: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return gormlock.Session(g.WithContext(ctx), key, fn, opts...)
		},
		lead: func(ctx context.Context, key string, fn func(context.Context) error, opts ...ormlock.Option) error {
			return gormlock.Lead(g.WithContext(ctx), key, fn, opts...)
		},
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(context.Context) error, opts ...ormlock.Option) error {
			return gormlock.RunOnce(g.WithContext(ctx), job, slot, func(tx *gorm.DB) error { return fn(tx.Statement.Context) }, opts...)
		},
		migrate: func(ctx context.Context, opts ...ormlock.Option) error {
			return gormlock.Migrate(g.WithContext(ctx), opts...)
		},
	}
}

func entVerbs(t *testing.T, k testdb.Kind) verbs {
	c, _ := enttest.Open(t, k)
	return verbs{
		tx: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return entlock.Transaction(ctx, c, key, func(tx *ent.Tx) error { return fn(entlock.Context(tx)) }, opts...)
		},
		session: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return entlock.Session(ctx, c, key, fn, opts...)
		},
		lead: func(ctx context.Context, key string, fn func(context.Context) error, opts ...ormlock.Option) error {
			return entlock.Lead(ctx, c, key, fn, opts...)
		},
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(context.Context) error, opts ...ormlock.Option) error {
			return entlock.RunOnce(ctx, c, job, slot, func(tx *ent.Tx) error { return fn(entlock.Context(tx)) }, opts...)
		},
		migrate: func(ctx context.Context, opts ...ormlock.Option) error { return entlock.Migrate(ctx, c, opts...) },
	}
}

func pgxVerbs(t *testing.T, k testdb.Kind) verbs {
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t, k))
	if err != nil {
		t.Fatal(err)
	}
	if k == testdb.PgBouncer {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return verbs{
		tx: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.Transaction(ctx, pool, key, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) }, opts...)
		},
		session: func(ctx context.Context, key ormlock.Key, fn func(context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.Session(ctx, pool, key, fn, opts...)
		},
		lead: func(ctx context.Context, key string, fn func(context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.Lead(ctx, pool, key, fn, opts...)
		},
		runOnce: func(ctx context.Context, job string, slot time.Time, fn func(context.Context) error, opts ...ormlock.Option) error {
			return pgxlock.RunOnce(ctx, pool, job, slot, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) }, opts...)
		},
		migrate: func(ctx context.Context, opts ...ormlock.Option) error { return pgxlock.Migrate(ctx, pool, opts...) },
	}
}

// forEach runs f for every adapter on every server.
func forEach(t *testing.T, f func(t *testing.T, k testdb.Kind, v verbs)) {
	for _, a := range []string{"gormlock", "entlock", "sqllock", "pgxlock"} {
		t.Run(a, func(t *testing.T) {
			for _, k := range testdb.Kinds() {
				t.Run(string(k), func(t *testing.T) {
					var v verbs
					switch a {
					case "gormlock":
						v = gormVerbs(t, k, testdb.Open(t, k))
					case "entlock":
						v = entVerbs(t, k)
					case "sqllock":
						v = sqlVerbs(testdb.Open(t, k))
					case "pgxlock":
						if k.Dialect() != "postgres" {
							t.Skip("pgxlock is PostgreSQL only")
						}
						v = pgxVerbs(t, k)
					}
					f(t, k, v)
				})
			}
		})
	}
}

// telemetry is an SDK with an in-memory span recorder and a manual reader.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	opt    ormlock.Option
}

func newTelemetry(opts ...otelormlock.Option) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.opt = otelormlock.New(append([]otelormlock.Option{otelormlock.WithTracerProvider(tel.tp), otelormlock.WithMeterProvider(mp)}, opts...)...)
	return tel
}

// span returns the one ended span named name, failing otherwise.
func (tel *telemetry) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans named %s, want 1", len(found), name)
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// metrics collects the reader's metrics by name.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumBy returns the int sum of metric name's points whose attributes
// include key=value ("" key: all points).
func sumBy(t *testing.T, ms map[string]metricdata.Metrics, name, key, value string) int64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return 0
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: %T, want an int64 sum", name, m.Data)
	}
	var n int64
	for _, p := range s.DataPoints {
		if v, ok := p.Attributes.Value(attribute.Key(key)); key == "" || ok && v.AsString() == value {
			n += p.Value
		}
	}
	return n
}

func product(k testdb.Kind) string {
	if k == testdb.MariaDB {
		return "mariadb"
	}
	return "postgresql"
}

// checkVerbSpan checks span name of a verb: a child of parent, that fn's
// context carried (inFn), with the server and the outcome.
func checkVerbSpan(t *testing.T, tel *telemetry, k testdb.Kind, name string, parent trace.SpanContext, inFn trace.SpanContext, outcome string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := tel.span(t, name)
	if s.Parent().SpanID() != parent.SpanID() {
		t.Errorf("%s: parent %v, want the caller's %v", name, s.Parent().SpanID(), parent.SpanID())
	}
	if inFn.IsValid() && inFn.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("%s: fn's context carries span %v, want the verb's %v", name, inFn.SpanID(), s.SpanContext().SpanID())
	}
	if v, _ := attr(s, "db.system.name"); v.AsString() != product(k) {
		t.Errorf("%s: db.system.name %q, want %q", name, v.AsString(), product(k))
	}
	mech := "advisory"
	if k.Dialect() == "mysql" {
		mech = "named"
	}
	if v, _ := attr(s, "ormlock.mechanism"); v.AsString() != mech {
		t.Errorf("%s: ormlock.mechanism %q, want %q", name, v.AsString(), mech)
	}
	if v, _ := attr(s, "ormlock.outcome"); v.AsString() != outcome {
		t.Errorf("%s: ormlock.outcome %q, want %q", name, v.AsString(), outcome)
	}
	if _, ok := attr(s, "ormlock.key"); ok {
		t.Errorf("%s: ormlock.key without WithKeyAttribute", name)
	}
	return s
}

// TestSpansAndMetrics: every verb of every adapter on every server makes
// its span under the caller's, carried by fn's context, with the wait and
// the release as events, and counts its attempt; the gauges come back to
// zero; a lock held elsewhere is not_acquired.
func TestSpansAndMetrics(t *testing.T) {
	forEach(t, func(t *testing.T, k testdb.Kind, v verbs) {
		tel := newTelemetry()
		ctx, caller := tel.tp.Tracer("test").Start(context.Background(), "caller")
		parent := caller.SpanContext()
		key := "otel-" + t.Name()
		var inFn trace.SpanContext
		record := func(ctx context.Context) error {
			inFn = trace.SpanContextFromContext(ctx)
			if !ormlock.Held(ctx) {
				t.Error("Held is false in fn")
			}
			return nil
		}

		tbl := testdb.Table(t, k, "otel")
		if err := v.migrate(ctx, ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		if err := v.tx(ctx, ormlock.Name(key), record, tel.opt); err != nil {
			t.Fatal(err)
		}
		s := checkVerbSpan(t, tel, k, "ormlock.Transaction", parent, inFn, "acquired")
		if !hasEvent(s, "ormlock.acquired") || !hasEvent(s, "ormlock.released") {
			t.Errorf("Transaction span events %v", s.Events())
		}
		if v, _ := attr(s, "ormlock.wait"); v.AsString() != "try" {
			t.Errorf("ormlock.wait %q", v.AsString())
		}

		if err := v.session(ctx, ormlock.Name(key), record, tel.opt, ormlock.WithFencing(), ormlock.WithLedgerTable(tbl)); err != nil {
			t.Fatal(err)
		}
		s = checkVerbSpan(t, tel, k, "ormlock.Session", parent, inFn, "acquired")
		if v, ok := attr(s, "ormlock.fencing_token"); !ok || v.AsInt64() <= 0 {
			t.Errorf("Session with fencing: ormlock.fencing_token %v", v)
		}

		lctx, cancel := context.WithCancel(ctx)
		err := v.lead(lctx, key, func(ctx context.Context) error {
			defer cancel()
			return record(ctx)
		}, tel.opt)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		s = checkVerbSpan(t, tel, k, "ormlock.Lead", parent, trace.SpanContext{}, "acquired")
		if v, _ := attr(s, "ormlock.term"); v.AsInt64() != 1 || !hasEvent(s, "ormlock.elected") {
			t.Errorf("Lead: ormlock.term %v, events %v", v, s.Events())
		}
		term := tel.span(t, "ormlock.Lead.term")
		if term.Parent().SpanID() != s.SpanContext().SpanID() || inFn.SpanID() != term.SpanContext().SpanID() {
			t.Errorf("Lead's term span: parent %v (the Lead span %v), fn's context's span %v, want the term's %v",
				term.Parent().SpanID(), s.SpanContext().SpanID(), inFn.SpanID(), term.SpanContext().SpanID())
		}
		if v, _ := attr(term, "ormlock.term"); v.AsInt64() != 1 {
			t.Errorf("Lead's term span: ormlock.term %v", v)
		}

		for range 2 {
			if err := v.runOnce(ctx, "job", testdb.Slot(0), record, ormlock.WithLedgerTable(tbl), tel.opt); err != nil && !errors.Is(err, ormlock.ErrAlreadyDone) {
				t.Fatal(err)
			}
		}
		var runs []sdktrace.ReadOnlySpan
		for _, s := range tel.spans.Ended() {
			if s.Name() == "ormlock.RunOnce" {
				runs = append(runs, s)
			}
		}
		if len(runs) != 2 {
			t.Fatalf("%d RunOnce spans", len(runs))
		}
		if v, _ := attr(runs[0], "ormlock.outcome"); v.AsString() != "acquired" {
			t.Errorf("first run: outcome %q", v.AsString())
		}
		if v, _ := attr(runs[1], "ormlock.outcome"); v.AsString() != "already_done" {
			t.Errorf("second run: outcome %q", v.AsString())
		}
		if v, _ := attr(runs[0], "ormlock.job"); v.AsString() != "job" {
			t.Errorf("run: ormlock.job %q", v.AsString())
		}
		if _, ok := attr(runs[0], "ormlock.slot"); !ok {
			t.Error("run: no ormlock.slot")
		}

		release := testdb.RawHold(t, k, "", key+"-held")
		err = v.tx(ctx, ormlock.Name(key+"-held"), record, tel.opt)
		release()
		if !errors.Is(err, ormlock.ErrNotAcquired) {
			t.Fatalf("held elsewhere: %v", err)
		}
		caller.End()

		ms := tel.metrics(t)
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "acquired"); n != 4 {
			t.Errorf("attempts acquired: %d, want 4", n)
		}
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "already_done"); n != 1 {
			t.Errorf("attempts already_done: %d, want 1", n)
		}
		if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "not_acquired"); n != 1 {
			t.Errorf("attempts not_acquired: %d, want 1", n)
		}
		for _, g := range []string{"ormlock.lock.held", "ormlock.lock.waiting"} {
			if n := sumBy(t, ms, g, "", ""); n != 0 {
				t.Errorf("%s: %d after every verb returned", g, n)
			}
		}
		h, ok := ms["ormlock.lock.acquire.duration"].Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) == 0 || len(h.DataPoints[0].Bounds) != len(otelormlock.AcquireBuckets) || ms["ormlock.lock.acquire.duration"].Unit != "s" {
			t.Errorf("acquire.duration: %+v", ms["ormlock.lock.acquire.duration"])
		}
		if _, ok := ms["ormlock.lock.hold.duration"].Data.(metricdata.Histogram[float64]); !ok {
			t.Errorf("hold.duration: %+v", ms["ormlock.lock.hold.duration"])
		}
		for _, m := range ms {
			for _, kv := range attrsOf(m) {
				if kv == "ormlock.slot" || kv == "ormlock.key" || kv == "ormlock.acquisition" {
					t.Errorf("%s has the unbounded label %s", m.Name, kv)
				}
			}
		}
	})
}

// attrsOf lists the attribute keys of m's points.
func attrsOf(m metricdata.Metrics) []string {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	var keys []string
	for _, s := range sets {
		for _, kv := range s.ToSlice() {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys
}

// holderPID is the server connection that holds key.
func holderPID(t *testing.T, k testdb.Kind, key string) int64 {
	t.Helper()
	h, err := sqllock.Holder(context.Background(), testdb.Open(t, k), key)
	if err != nil || !h.Held {
		t.Fatalf("holder of %q: %+v %v", key, h, err)
	}
	return h.PID
}

// awaitLoss waits until ctx, a Session's fn's, ends (the loss seen); it
// gives up after 30s.
func awaitLoss(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("loss not seen")
	}
}

// checkLost checks a Session that lost its lock (err is what it
// returned): its span says lost, with an ormlock.lost event; the lost
// counter and the attempts' lost outcome count one; the gauges are back
// to zero.
func checkLost(t *testing.T, tel *telemetry, err error) {
	t.Helper()
	if !errors.Is(err, ormlock.ErrLockLost) {
		t.Fatalf("Session: %v, want ErrLockLost", err)
	}
	s := tel.span(t, "ormlock.Session")
	if v, _ := attr(s, "ormlock.outcome"); v.AsString() != "lost" || !hasEvent(s, "ormlock.lost") {
		t.Errorf("outcome %q, events %v", v.AsString(), s.Events())
	}
	ms := tel.metrics(t)
	if n := sumBy(t, ms, "ormlock.lock.lost", "", ""); n != 1 {
		t.Errorf("lost: %d", n)
	}
	if n := sumBy(t, ms, "ormlock.lock.attempts", "ormlock.outcome", "lost"); n != 1 {
		t.Errorf("attempts lost: %d", n)
	}
	for _, g := range []string{"ormlock.lock.held", "ormlock.lock.waiting"} {
		if n := sumBy(t, ms, g, "", ""); n != 0 {
			t.Errorf("%s: %d", g, n)
		}
	}
}

// TestLostLock: a Session whose backend is killed ends its span with
// outcome lost, an ormlock.lost event, the lost counter up and the held
// gauge back to zero, on every adapter and server.
func TestLostLock(t *testing.T) {
	forEach(t, func(t *testing.T, k testdb.Kind, v verbs) {
		tel := newTelemetry()
		key := "otel-lost-" + t.Name()
		err := v.session(context.Background(), ormlock.Name(key), func(ctx context.Context) error {
			testdb.Kill(t, k, holderPID(t, k, key))
			return awaitLoss(ctx)
		}, tel.opt, ormlock.WithKeepalive(200*time.Millisecond))
		checkLost(t, tel, err)
	})
}

// TestFrozenServer: the lock's PostgreSQL backend stopped (SIGSTOP) is a
// lost lock: the span says lost once the keepalive's ping goes unanswered,
// and the gauges come back to zero.
func TestFrozenServer(t *testing.T) {
	k := testdb.Postgres
	tel := newTelemetry()
	v := sqlVerbs(testdb.Open(t, k))
	key := "otel-frozen"
	err := v.session(context.Background(), ormlock.Name(key), func(ctx context.Context) error {
		pid := holderPID(t, k, key)
		if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
			t.Skipf("stop backend %d: %v", pid, err)
		}
		defer func() { _ = syscall.Kill(int(pid), syscall.SIGCONT) }()
		return awaitLoss(ctx)
	}, tel.opt, ormlock.WithKeepalive(300*time.Millisecond))
	checkLost(t, tel, err)
}

// TestLeadDeposed: a Lead whose first term's backend is killed is deposed
// and elected again: two term spans under the one ormlock.Lead span, the
// first ended by its loss, each carried by its own fn's context; the lost
// counter counts the deposition and the gauges come back to zero.
func TestLeadDeposed(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			tel := newTelemetry()
			v := sqlVerbs(testdb.Open(t, k))
			key := "otel-deposed-" + t.Name()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fnSpans []trace.SpanContext
			err := v.lead(ctx, key, func(fctx context.Context) error {
				fnSpans = append(fnSpans, trace.SpanContextFromContext(fctx))
				if len(fnSpans) == 1 {
					testdb.Kill(t, k, holderPID(t, k, key))
					<-fctx.Done()
					return nil
				}
				cancel()
				return nil
			}, tel.opt, ormlock.WithKeepalive(200*time.Millisecond))
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("Lead: %v", err)
			}
			lead := tel.span(t, "ormlock.Lead")
			var terms []sdktrace.ReadOnlySpan
			for _, s := range tel.spans.Ended() {
				if s.Name() == "ormlock.Lead.term" {
					terms = append(terms, s)
				}
			}
			if len(terms) != 2 || len(fnSpans) != 2 {
				t.Fatalf("%d term spans, %d terms run, want 2 each", len(terms), len(fnSpans))
			}
			for i, term := range terms {
				if term.Parent().SpanID() != lead.SpanContext().SpanID() || term.SpanContext().SpanID() != fnSpans[i].SpanID() {
					t.Errorf("term %d: not the Lead span's child carried by its fn's context", i+1)
				}
				if v, _ := attr(term, "ormlock.term"); v.AsInt64() != int64(i+1) {
					t.Errorf("term %d: ormlock.term %v", i+1, v)
				}
			}
			if !hasEvent(terms[0], "ormlock.lock_lost") || !hasEvent(lead, "ormlock.deposed") {
				t.Errorf("first term's events %v, Lead's %v", terms[0].Events(), lead.Events())
			}
			ms := tel.metrics(t)
			if n := sumBy(t, ms, "ormlock.lock.lost", "", ""); n != 1 {
				t.Errorf("lost: %d", n)
			}
			for _, g := range []string{"ormlock.lock.held", "ormlock.lock.waiting"} {
				if n := sumBy(t, ms, g, "", ""); n != 0 {
					t.Errorf("%s: %d", g, n)
				}
			}
		})
	}
}
