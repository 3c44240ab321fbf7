package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// benchLease is a row of the lease table: a lock is taken by inserting the
// row for its name (the primary key makes a second insert fail) and released
// by deleting it. This is the idea behind gocron-gorm-lock's CronJobLock,
// written here from scratch; ExpiresAt is what a cleaner would use to break
// the lease of a crashed holder (no cleaner runs in the benchmark).
type benchLease struct {
	Name      string    `gorm:"primaryKey;size:191"`
	Owner     string    `gorm:"size:64;not null"`
	ExpiresAt time.Time `gorm:"not null"`
}

// TableName is the lease table's name.
func (benchLease) TableName() string { return "ormlock_bench_leases" }

// leaseTTL is the lifetime written into a lease row.
const leaseTTL = time.Minute

type lease struct {
	*sqlBase
	gdb   *gorm.DB // SkipDefaultTransaction: one round trip per statement
	owner string
}

func openLease(_ context.Context, t Target, conns int) (Instance, error) {
	b, err := openSQLBase(t, conns)
	if err != nil {
		return nil, err
	}
	gdb, err := gormOn(t, b.db, true)
	if err == nil {
		err = gdb.AutoMigrate(&benchLease{})
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bench: lease table on %s: %w", t.Name, err)
	}
	owner := "bench-" + strconv.Itoa(os.Getpid())
	return &lease{sqlBase: b, gdb: gdb, owner: owner}, nil
}

// Bind takes the lease with one INSERT and releases it with one DELETE, both
// autocommitted (GORM's implicit transaction around each write is skipped, as
// the lease contender's best case; with GORM's default each write would add
// a BEGIN and a COMMIT). A duplicate key is "held elsewhere".
func (l *lease) Bind(key string, crit func()) Attempt {
	db := l.gdb
	owner := l.owner
	return func(context.Context) (bool, error) {
		row := benchLease{Name: key, Owner: owner, ExpiresAt: time.Now().Add(leaseTTL)}
		if err := db.Create(&row).Error; err != nil {
			if isDuplicateKey(err) {
				return false, nil
			}
			if isDeadlock(err) {
				return false, fmt.Errorf("%w: %w", ErrDeadlock, err)
			}
			return false, err
		}
		crit()
		res := db.Where("name = ? AND owner = ?", key, owner).Delete(&benchLease{})
		if res.Error != nil {
			return true, res.Error
		}
		if res.RowsAffected != 1 {
			return true, fmt.Errorf("bench: lease %q: release deleted %d rows", key, res.RowsAffected)
		}
		return true, nil
	}
}

// Hold inserts the lease row as another owner.
func (l *lease) Hold(_ context.Context, key string) (func() error, error) {
	other := l.owner + "-holder"
	row := benchLease{Name: key, Owner: other, ExpiresAt: time.Now().Add(leaseTTL)}
	if err := l.gdb.Create(&row).Error; err != nil {
		return nil, fmt.Errorf("bench: hold lease %q: %w", key, err)
	}
	return func() error {
		return l.gdb.Where("name = ? AND owner = ?", key, other).Delete(&benchLease{}).Error
	}, nil
}

// Leftover counts the lease rows this process left behind (there should be
// none).
func (l *lease) Leftover() (int64, error) {
	var n int64
	err := l.gdb.Model(&benchLease{}).Where("owner LIKE ?", l.owner+"%").Count(&n).Error
	return n, err
}

// ErrDeadlock is returned (wrapped) by an attempt of the lease table whose
// INSERT the server chose as a deadlock victim. InnoDB does this under
// contention: inserts that wait on a row being deleted each take a shared
// lock on it, and then all but one deadlock when they upgrade. The attempt
// did not take the lock, so the harness counts it as a loss and reports the
// count.
var ErrDeadlock = errors.New("bench: deadlock victim")

// isDeadlock reports a deadlock victim: SQLSTATE 40P01 on PostgreSQL, error
// 1213 on MySQL/MariaDB.
func isDeadlock(err error) bool { return serverError(err, "40P01", 1213) }

// isDuplicateKey reports a unique violation: SQLSTATE 23505 on PostgreSQL,
// error 1062 on MySQL/MariaDB.
func isDuplicateKey(err error) bool { return serverError(err, "23505", 1062) }

// serverError reports whether err is PostgreSQL's error of SQLSTATE
// sqlState or MySQL/MariaDB's error number.
func serverError(err error, sqlState string, number uint16) bool {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && pg.SQLState() == sqlState {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == number
}
