package gormlock

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
)

// PluginName is the name the plugin registers under in gorm.Config.Plugins.
const PluginName = "ormlock"

// Plugin holds ormlock defaults for a *gorm.DB. Register it with
// db.Use(gormlock.New(opts...)); every verb called on that db (or a session
// or transaction derived from it) starts from these defaults, and per-call
// options apply on top.
type Plugin struct {
	cfg config.Config
}

var _ gorm.Plugin = (*Plugin)(nil)

// New returns a plugin with the given defaults. Invalid options are reported
// by db.Use.
func New(opts ...ormlock.Option) *Plugin {
	return &Plugin{cfg: config.New(opts...)}
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return PluginName }

// Initialize implements gorm.Plugin: it rejects invalid options and, with
// ormlock.ErrUnsupportedDialect, any dialect other than postgres and mysql.
// It fails closed: the failure is recorded on db's configuration, and every
// verb called on db (or a session or transaction derived from it) returns
// this error without taking a lock, even when the caller ignored db.Use's
// error. A later successful db.Use(gormlock.New(...)) clears it. See
// docs/PROTOCOL.md (Set-up).
func (p *Plugin) Initialize(db *gorm.DB) error {
	err := p.cfg.Err()
	if err == nil {
		_, err = dialectOf(db)
	}
	if db.Config != nil {
		if db.Config.Plugins == nil {
			db.Config.Plugins = map[string]gorm.Plugin{}
		}
		if err != nil {
			err = fmt.Errorf("%w (gormlock: db.Use(gormlock.New(...)) failed with this error; every verb on this db returns it)", err)
			db.Config.Plugins[failedName] = &failed{err: err}
		} else {
			delete(db.Config.Plugins, failedName)
		}
	}
	return err
}

// Err returns the error of an invalid option given to [New], or nil; db.Use
// reports the same error. It lets a program (or the scheduler module) check
// a configuration before it has a *gorm.DB.
func (p *Plugin) Err() error { return p.cfg.Err() }

// failedName is the key under which a failed registration is recorded in
// gorm.Config.Plugins (GORM keeps no other trace of it).
const failedName = PluginName + ".failed"

// failed is the record of a failed registration: an entry in
// gorm.Config.Plugins that the verbs find. Should the same gorm.Config be
// given to another gorm.Open, its Initialize fails that Open with the error.
type failed struct{ err error }

func (f *failed) Name() string              { return failedName }
func (f *failed) Initialize(*gorm.DB) error { return f.err }
