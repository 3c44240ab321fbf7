package bench_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/bench"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// shapeVariants are the keys BenchmarkShapes compares, each made from a
// fresh base name per goroutine: one exclusive key (the denominator), All
// of 1, 2 and 8 keys, Shared (PostgreSQL) and Semaphore(10).
var shapeVariants = []struct {
	name string
	pg   bool // PostgreSQL only
	key  func(base string) ormlock.Key
}{
	{"key", false, func(b string) ormlock.Key { return ormlock.Name(b) }},
	{"all1", false, func(b string) ormlock.Key { return ormlock.All(b) }},
	{"all2", false, func(b string) ormlock.Key { return ormlock.All(b+"/1", b+"/2") }},
	{"all8", false, func(b string) ormlock.Key {
		ks := make([]string, 8)
		for i := range ks {
			ks[i] = fmt.Sprintf("%s/%d", b, i)
		}
		return ormlock.All(ks...)
	}},
	{"shared", true, func(b string) ormlock.Key { return ormlock.Shared(b) }},
	{"sem10", false, func(b string) ormlock.Key { return ormlock.Semaphore(b, 10) }},
}

// BenchmarkShapes measures gormlock.Transaction (empty fn, each attempt
// free) of each lock shape against one exclusive key, interleaved: one
// iteration runs one attempt of every variant in an order rotated per
// iteration, on loopback and through the simulated network link
// (-link-delay, 250 µs each way by default), on PostgreSQL, PgBouncer and
// MariaDB. It reports each variant's median attempt (<variant>-p50-µs) and
// its ratio of throughput to one key (<variant>÷key: the inverse ratio of
// the medians; below 1 is slower).
//
//	cd bench && go test -run '^$' -bench BenchmarkShapes -benchtime 300x .
func BenchmarkShapes(b *testing.B) {
	onNetworks(b, func(b *testing.B, links *bench.Links) {
		for _, tgt := range []struct {
			name string
			kind testdb.Kind
		}{{bench.NamePostgres, testdb.Postgres}, {bench.NamePgBouncer, testdb.PgBouncer}, {bench.NameMariaDB, testdb.MariaDB}} {
			b.Run(tgt.name, func(b *testing.B) {
				shapeSteps(b, tgt.kind, routed(b, links, sqlTarget(tgt.name, tgt.kind).make(b)))
			})
		}
	})
}

func shapeSteps(b *testing.B, k testdb.Kind, bt bench.Target) {
	driver := "pgx"
	if bt.Dialect == bench.MySQL {
		driver = "mysql"
	}
	sqlDB, err := sql.Open(driver, bt.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer sqlDB.Close()
	sqlDB.SetMaxOpenConns(4)
	sqlDB.SetMaxIdleConns(4)
	var dial gorm.Dialector = postgres.New(postgres.Config{Conn: sqlDB})
	if bt.Dialect == bench.MySQL {
		dial = mysql.New(mysql.Config{Conn: sqlDB, SkipInitializeWithVersion: true})
	}
	db, err := gorm.Open(dial, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	var keys []ormlock.Key
	for _, v := range shapeVariants {
		if v.pg && bt.Dialect != bench.Postgres {
			continue
		}
		names = append(names, v.name)
		keys = append(keys, v.key(uniq(b.Name()+"-"+v.name)))
	}
	fn := func(*gorm.DB) error { return nil }
	durs := make([][]time.Duration, len(keys))
	attempt := func(i int) {
		t := time.Now()
		if err := gormlock.Transaction(db.WithContext(context.Background()), keys[i], fn); err != nil {
			b.Fatalf("%s: %v", names[i], err)
		}
		durs[i] = append(durs[i], time.Since(t))
	}
	for i := range keys { // warm up: connections, the server check, prepared statements
		attempt(i)
		durs[i] = durs[i][:0]
	}
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		for j := range keys {
			attempt((n + j) % len(keys))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(keys))
	for i, d := range durs {
		slices.Sort(d)
		p50[i] = float64(d[len(d)/2].Microseconds())
		b.ReportMetric(p50[i], names[i]+"-p50-µs")
	}
	for i := 1; i < len(keys); i++ {
		b.ReportMetric(p50[0]/p50[i], names[i]+"÷key")
	}
	testdb.AssertNoLeaks(b, k, sqlDB)
}
