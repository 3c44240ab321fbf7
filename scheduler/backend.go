package scheduler

import "github.com/ormlock/ormlock/scheduler/internal/backend"

// Backend is the database side of the adapters: the database that holds the
// locks and the RunOnce ledger, and the data layer through which it is
// reached. Build it with the package of your data layer —
// [github.com/ormlock/ormlock/scheduler/gormsched].Backend on a *gorm.DB,
// [github.com/ormlock/ormlock/scheduler/entsched].Backend on an ent client,
// [github.com/ormlock/ormlock/scheduler/sqlsched].Backend on a *sql.DB,
// [github.com/ormlock/ormlock/scheduler/pgxsched].Backend on a *pgxpool.Pool —
// so that a program links only the one it uses. The zero Backend is not
// usable, and the constructors reject it.
//
// A Backend is a small value that may be copied and shared; every
// scheduler instance (every replica) builds its own on its own pool. Its
// methods are the adapters' plumbing, not for use by programs.
type Backend = backend.Backend
