package gormlock

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// PluginName is the name the plugin registers under in gorm.Config.Plugins.
const PluginName = "ormlock"

// Plugin holds ormlock defaults for a *gorm.DB. Register it with
// db.Use(gormlock.New(opts...)); every verb called on that db (or a session
// or transaction derived from it) starts from these defaults, and per-call
// options apply on top.
type Plugin struct {
	cfg ormlock.Config
}

var _ gorm.Plugin = (*Plugin)(nil)

// New returns a plugin with the given defaults. Invalid options are reported
// by db.Use.
func New(opts ...ormlock.Option) *Plugin {
	return &Plugin{cfg: ormlock.NewConfig(opts...)}
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return PluginName }

// Initialize implements gorm.Plugin: it rejects invalid options and, with
// ormlock.ErrUnsupportedDialect, any dialect other than postgres and mysql,
// so that a misconfiguration fails at start-up rather than at midnight.
func (p *Plugin) Initialize(db *gorm.DB) error {
	if err := p.cfg.Err(); err != nil {
		return err
	}
	if _, err := dialectOf(db); err != nil {
		return err
	}
	return nil
}

// Config returns the plugin's defaults.
func (p *Plugin) Config() ormlock.Config { return p.cfg }

func dialectOf(db *gorm.DB) (lockproto.Dialect, error) {
	if db.Dialector == nil {
		return 0, fmt.Errorf("%w: *gorm.DB has no dialector", ormlock.ErrUnsupportedDialect)
	}
	return lockproto.DialectOf(db.Dialector.Name())
}

// configFor returns the plugin's defaults (if registered) with opts on top.
func configFor(db *gorm.DB, opts []ormlock.Option) ormlock.Config {
	if db.Config != nil {
		if p, ok := db.Config.Plugins[PluginName].(*Plugin); ok {
			return p.cfg.With(opts...)
		}
	}
	return ormlock.NewConfig(opts...)
}
