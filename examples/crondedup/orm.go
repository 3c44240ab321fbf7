package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/entlock"
	"github.com/ormlock/ormlock/examples/crondedup/ent"
	"github.com/ormlock/ormlock/examples/crondedup/ent/settlement"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/gormlock"
)

// replica is one scheduler instance's database side: its own connection
// pool, and the job run through RunOnce on it, with GORM or with ent.
type replica interface {
	// migrate creates the RunOnce ledger and the settlements table.
	migrate(ctx context.Context) error
	// runOnce runs the job for slot at most once across all replicas: in
	// one transaction with the slot's ledger row it records the
	// settlement and works for a while.
	runOnce(ctx context.Context, job string, slot time.Time, work time.Duration) error
	// settlements counts the settlement rows of job for each of slots.
	settlements(ctx context.Context, job string, slots []string) (map[string]int, error)
	// runs reads the job's last limit runs from the ledger.
	runs(ctx context.Context, job string, limit int) ([]ormlock.Run, error)
	close() error
}

// slotText is how the settlements table stores a slot.
func slotText(slot time.Time) string { return slot.UTC().Format(time.RFC3339) }

// ---- GORM ----

// Settlement is the work of one run: one row per run, written in the same
// transaction as the run's ledger row (table gorm_settlements; the ent
// variant has its own, ent_settlements).
type Settlement struct {
	ID    int64  `gorm:"primaryKey"`
	Job   string `gorm:"size:191;not null"`
	Slot  string `gorm:"size:40;not null"`
	RanBy string `gorm:"size:64;not null"`
}

// TableName is gorm_settlements.
func (Settlement) TableName() string { return "gorm_settlements" }

type gormReplica struct {
	db   *gorm.DB
	name string
}

func openGORM(dsn, name string) (*gormReplica, error) {
	db, err := demo.OpenGORM(dsn)
	if err != nil {
		return nil, err
	}
	// The plugin sets this replica's defaults: its name in the ledger.
	if err := db.Use(gormlock.New(ormlock.WithOwner(name))); err != nil {
		_ = demo.CloseGORM(db)
		return nil, err
	}
	return &gormReplica{db: db, name: name}, nil
}

func (r *gormReplica) migrate(ctx context.Context) error {
	db := r.db.WithContext(ctx)
	if err := gormlock.Migrate(db); err != nil {
		return err
	}
	return db.AutoMigrate(&Settlement{})
}

func (r *gormReplica) runOnce(ctx context.Context, job string, slot time.Time, work time.Duration) error {
	return gormlock.RunOnce(r.db.WithContext(ctx), job, slot, func(tx *gorm.DB) error {
		if err := tx.Create(&Settlement{Job: job, Slot: slotText(slot), RanBy: r.name}).Error; err != nil {
			return err
		}
		time.Sleep(work) // the job's work, inside its transaction
		return nil
	})
}

func (r *gormReplica) settlements(ctx context.Context, job string, slots []string) (map[string]int, error) {
	var rows []struct {
		Slot string
		N    int
	}
	err := r.db.WithContext(ctx).Model(&Settlement{}).Select("slot, COUNT(*) AS n").
		Where("job = ? AND slot IN ?", job, slots).Group("slot").Scan(&rows).Error
	out := make(map[string]int, len(rows))
	for _, row := range rows {
		out[row.Slot] = row.N
	}
	return out, err
}

func (r *gormReplica) runs(ctx context.Context, job string, limit int) ([]ormlock.Run, error) {
	return gormlock.Runs(r.db.WithContext(ctx), job, limit)
}

func (r *gormReplica) close() error { return demo.CloseGORM(r.db) }

// ---- ent ----

type entReplica struct {
	client *ent.Client
	name   string
}

func openEnt(dsn, name string) (*entReplica, error) {
	driver, dia := "mysql", dialect.MySQL
	if demo.IsPostgres(dsn) {
		driver, dia = "pgx", dialect.Postgres
	}
	db, err := sql.Open(driver, demo.PoolerSafe(dsn))
	if err != nil {
		return nil, err
	}
	// entlock.Wrap lets the verbs take locks inside ent's transactions; its
	// options are this replica's defaults.
	drv := entlock.Wrap(entsql.OpenDB(dia, db), ormlock.WithOwner(name))
	if err := drv.Err(); err != nil {
		db.Close()
		return nil, err
	}
	return &entReplica{client: ent.NewClient(ent.Driver(drv)), name: name}, nil
}

func (r *entReplica) migrate(ctx context.Context) error {
	if err := entlock.Migrate(ctx, r.client); err != nil {
		return err
	}
	return r.client.Schema.Create(ctx)
}

func (r *entReplica) runOnce(ctx context.Context, job string, slot time.Time, work time.Duration) error {
	return entlock.RunOnce(ctx, r.client, job, slot, func(tx *ent.Tx) error {
		if err := tx.Settlement.Create().SetJob(job).SetSlot(slotText(slot)).SetRanBy(r.name).Exec(ctx); err != nil {
			return err
		}
		time.Sleep(work) // the job's work, inside its transaction
		return nil
	})
}

func (r *entReplica) settlements(ctx context.Context, job string, slots []string) (map[string]int, error) {
	var rows []struct {
		Slot  string `json:"slot"`
		Count int    `json:"count"`
	}
	err := r.client.Settlement.Query().Where(settlement.Job(job), settlement.SlotIn(slots...)).
		GroupBy(settlement.FieldSlot).Aggregate(ent.Count()).Scan(ctx, &rows)
	out := make(map[string]int, len(rows))
	for _, row := range rows {
		out[row.Slot] = row.Count
	}
	return out, err
}

func (r *entReplica) runs(ctx context.Context, job string, limit int) ([]ormlock.Run, error) {
	return entlock.Runs(ctx, r.client, job, limit)
}

func (r *entReplica) close() error { return r.client.Close() }

func openReplica(orm, dsn, name string) (replica, error) {
	switch orm {
	case "gorm":
		r, err := openGORM(dsn, name)
		if err != nil {
			return nil, err
		}
		return r, nil
	case "ent":
		r, err := openEnt(dsn, name)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("-orm %q: want gorm or ent", orm)
}
