package main

import (
	"runtime/debug"
	"testing"
)

// The version line is the module's version as go install records it, with
// "(devel)" (and the commit, when known) for a work tree's build.
func TestVersionLine(t *testing.T) {
	info := func(v string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/ormlock/ormlock", Version: v}, Settings: settings}, true
		}
	}
	for _, c := range []struct {
		read func() (*debug.BuildInfo, bool)
		want string
	}{
		{info("v0.4.0"), "v0.4.0 (go1.26.0)"},
		{info("v0.4.1-0.20261201120000-0123456789ab"), "v0.4.1-0.20261201120000-0123456789ab (go1.26.0)"},
		{info("(devel)"), "(devel) (go1.26.0)"},
		{info(""), "(devel) (go1.26.0)"},
		{info("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: "a0a7364f00d1e2c3b4a5968778695a4b3c2d1e0f"}), "(devel) a0a7364f00d1 (go1.26.0)"},
		{info("v0.4.0", debug.BuildSetting{Key: "vcs.revision", Value: "a0a7364f00d1e2c3b4a5968778695a4b3c2d1e0f"}), "v0.4.0 (go1.26.0)"},
		{func() (*debug.BuildInfo, bool) { return nil, false }, "(devel) (no build information)"},
	} {
		if got := version(c.read); got != c.want {
			t.Errorf("version = %q, want %q", got, c.want)
		}
	}
}
