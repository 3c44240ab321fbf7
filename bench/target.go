package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"github.com/redis/go-redis/v9"
)

// Dialect is the lock protocol family of a [Target].
type Dialect string

// The dialects of the comparison.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	Redis    Dialect = "redis"
)

// Target is one database the contenders run on.
type Target struct {
	// Name labels the target in the report, e.g. "PostgreSQL".
	Name string
	// Dialect says which protocol applies.
	Dialect Dialect
	// DSN is the database/sql DSN (driver "pgx" or "mysql"), or the Redis
	// address (host:port).
	DSN string
	// Baseline names the target whose hand-written SQL row is the baseline
	// of this target's ratios; empty means the target itself. Redis has no
	// hand-written SQL, so its ratios are to PostgreSQL's.
	Baseline string
}

// Target names used by [Targets].
const (
	NamePostgres      = "PostgreSQL"
	NamePgBouncer     = "PgBouncer"
	NameMariaDB       = "MariaDB"
	NameMariaDBInterp = "MariaDB+interp"
	NameRedis         = "Redis"
)

// Targets returns the databases of the comparison: PostgreSQL at pg,
// PostgreSQL behind PgBouncer (transaction mode) at bouncer, MariaDB at
// maria twice (as given, and with interpolateParams=true), and Redis at the
// address redisAddr. An empty argument leaves its target out.
func Targets(pg, bouncer, maria, redisAddr string) []Target {
	var ts []Target
	if pg != "" {
		ts = append(ts, Target{Name: NamePostgres, Dialect: Postgres, DSN: pg})
	}
	if bouncer != "" {
		ts = append(ts, Target{Name: NamePgBouncer, Dialect: Postgres, DSN: bouncer})
	}
	if maria != "" {
		ts = append(ts,
			Target{Name: NameMariaDB, Dialect: MySQL, DSN: WithDSNParam(maria, "interpolateParams", "false")},
			Target{Name: NameMariaDBInterp, Dialect: MySQL, DSN: WithDSNParam(maria, "interpolateParams", "true")})
	}
	if redisAddr != "" {
		base := ""
		if pg != "" {
			base = NamePostgres
		}
		ts = append(ts, Target{Name: NameRedis, Dialect: Redis, DSN: redisAddr, Baseline: base})
	}
	return ts
}

// WithDSNParam returns the go-sql-driver/mysql DSN dsn with the parameter
// key set to value (replacing an earlier value).
func WithDSNParam(dsn, key, value string) string {
	base, query, _ := strings.Cut(dsn, "?")
	var kept []string
	if query != "" {
		for _, kv := range strings.Split(query, "&") {
			if k, _, _ := strings.Cut(kv, "="); k != key {
				kept = append(kept, kv)
			}
		}
	}
	kept = append(kept, key+"="+value)
	return base + "?" + strings.Join(kept, "&")
}

// driverName is the database/sql driver of a SQL target.
func (t Target) driverName() string {
	if t.Dialect == MySQL {
		return "mysql"
	}
	return "pgx"
}

// openSQL opens a pool on t sized for conns concurrent users, so that no
// connection is opened or closed during a measurement.
func (t Target) openSQL(conns int) (*sql.DB, error) {
	db, err := sql.Open(t.driverName(), t.DSN)
	if err != nil {
		return nil, fmt.Errorf("bench: open %s: %w", t.Name, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("bench: ping %s: %w", t.Name, err)
	}
	return db, nil
}

// openRedis opens a go-redis client on t.
func (t Target) openRedis(conns int) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: t.DSN, PoolSize: conns, MinIdleConns: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("bench: ping %s: %w", t.Name, err)
	}
	return c, nil
}

// ServerVersion asks t's server for its version string.
func (t Target) ServerVersion(ctx context.Context) (string, error) {
	if t.Dialect == Redis {
		c, err := t.openRedis(1)
		if err != nil {
			return "", err
		}
		defer c.Close()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return "Redis " + v, nil
			}
		}
		return "Redis (unknown version)", nil
	}
	db, err := t.openSQL(1)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	q := "SELECT version()"
	if t.Dialect == MySQL {
		q = "SELECT CONCAT('MariaDB ', VERSION())"
	}
	if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return "", err
	}
	if i := strings.Index(v, " on "); i > 0 && t.Dialect == Postgres {
		v = v[:i] // "PostgreSQL 15.x (Debian ...)" without the build details
	}
	return v, nil
}
