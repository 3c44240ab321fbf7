package testdb

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// ErrMissingBinaries is wrapped by the errors of Binaries and StartServer when
// a server's binaries are not installed.
var ErrMissingBinaries = errors.New("database server binaries not found")

const installHint = `install them with "apt-get install -y postgresql pgbouncer mariadb-server" (or run "make test", which installs them)`

// extraDirs are searched after PATH: Debian keeps daemons in sbin dirs that a
// non-root PATH may lack.
var extraDirs = []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"}

func lookBin(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, d := range extraDirs {
			p := filepath.Join(d, n)
			if isExec(p) {
				return p
			}
		}
	}
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Environment variables that choose other server binaries.
const (
	envPGBinDir   = "ORMLOCK_TEST_PG_BINDIR" // directory with initdb and postgres
	envPgBouncer  = "ORMLOCK_TEST_PGBOUNCER" // path of the pgbouncer binary
	envPGCacheDir = "ORMLOCK_PG_CACHE"       // where scripts/fetch-postgres unpacks releases
)

// pgBinDir finds the directory with initdb and postgres: ORMLOCK_TEST_PG_BINDIR
// when set (even when it lacks them: the error then names it), else the
// highest version under /usr/lib/postgresql/*/bin (Debian), else PATH.
func pgBinDir() string {
	if d := os.Getenv(envPGBinDir); d != "" {
		return d
	}
	return systemPGBinDir()
}

// systemPGBinDir is pgBinDir without the environment variable.
func systemPGBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	ver := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return ver(dirs[i]) > ver(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if p := lookBin("initdb"); p != "" {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

type binaries struct {
	initdb, postgres  string // PostgreSQL
	pgbouncer         string // PgBouncer
	mariadbd, install string // MariaDB
	missing           []string
}

func findBinaries(k Kind, withPostgres bool) binaries {
	var b binaries
	if k == Postgres || (k == PgBouncer && withPostgres) {
		b = b.withPGBinDir(pgBinDir())
	}
	if k == PgBouncer {
		if p := os.Getenv(envPgBouncer); p != "" {
			if b.pgbouncer = p; !isExec(p) {
				b.pgbouncer = ""
				b.missing = append(b.missing, p+" ("+envPgBouncer+")")
			}
		} else if b.pgbouncer = lookBin("pgbouncer"); b.pgbouncer == "" {
			b.missing = append(b.missing, "pgbouncer")
		}
	}
	if k == MariaDB {
		if b.mariadbd = lookBin("mariadbd", "mysqld"); b.mariadbd == "" {
			b.missing = append(b.missing, "mariadbd")
		}
		if b.install = lookBin("mariadb-install-db", "mysql_install_db"); b.install == "" {
			b.missing = append(b.missing, "mariadb-install-db")
		}
	}
	return b
}

// withPGBinDir sets initdb and postgres from dir, or records them missing.
func (b binaries) withPGBinDir(d string) binaries {
	initdb, postgres := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
	if d != "" && isExec(initdb) && isExec(postgres) {
		b.initdb, b.postgres = initdb, postgres
		return b
	}
	if d == "" {
		b.missing = append(b.missing, "initdb", "postgres")
	} else {
		b.missing = append(b.missing, "initdb and postgres in "+d)
	}
	return b
}

func (b binaries) err(k Kind) error {
	if len(b.missing) == 0 {
		return nil
	}
	return fmt.Errorf("testdb: %s: %w (%s); %s", k, ErrMissingBinaries, strings.Join(b.missing, ", "), installHint)
}

// Binaries reports whether the binaries needed to start a server of kind k
// (for PgBouncer: PgBouncer and PostgreSQL) are installed: nil when they are,
// else an error wrapping ErrMissingBinaries that names the install command.
func Binaries(k Kind) error {
	if !k.valid() {
		return fmt.Errorf("testdb: unknown kind %q", k)
	}
	return findBinaries(k, true).err(k)
}

// skipOrFail skips the test for missing binaries, or fails it when CI is set
// (CI never passes by skipping); any other error fails the test.
func skipOrFail(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrMissingBinaries) && os.Getenv("CI") == "" {
		tb.Skipf("%v", err)
		return
	}
	tb.Fatalf("%v", err)
}
