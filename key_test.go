package ormlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/keyhash"
)

func TestKeyForms(t *testing.T) {
	if k := ormlock.KeyOf("daily-settlement"); k != ormlock.Name("daily-settlement") || !k.IsName() {
		t.Errorf("string -> %v", k)
	}
	if k := ormlock.KeyOf(int64(42)); k != ormlock.ID(42) {
		t.Errorf("int64 -> %v", k)
	}
	if k := ormlock.KeyOf(42); k != ormlock.ID(42) {
		t.Errorf("int -> %v", k)
	}
	if k := ormlock.KeyOf(ormlock.Pair(1, 2)); !k.IsPair() || k.String() != "pair:1,2" {
		t.Errorf("pair -> %v", k)
	}

	pg := ormlock.Name("daily-settlement").Postgres("")
	if pg.IsPair || pg.Int64 != -2533923874772390729 {
		t.Errorf("name on postgres = %+v", pg)
	}
	if got := ormlock.Name("daily-settlement").Postgres("billing").Int64; got != keyhash.Int64NS("billing", "daily-settlement") {
		t.Errorf("namespaced name = %d", got)
	}
	if got := ormlock.ID(12345).Postgres("billing"); got.Int64 != 12345 || got.IsPair {
		t.Errorf("id ignores namespace on postgres: %+v", got)
	}
	if got := ormlock.Pair(3, -4).Postgres(""); !got.IsPair || got.ClassID != 3 || got.ObjID != -4 {
		t.Errorf("pair = %+v", got)
	}
	for _, c := range []struct {
		k    ormlock.Key
		ns   string
		want string
	}{
		{ormlock.Name("job"), "", "job"},
		{ormlock.Name("job"), "billing", "billing:job"},
		{ormlock.ID(-7), "", "-7"},
		{ormlock.ID(7), "app", "app:7"},
		{ormlock.Pair(1, 2), "", "1:2"},
	} {
		if got := c.k.MySQL(c.ns); got != c.want {
			t.Errorf("%v in %q on mysql = %q, want %q", c.k, c.ns, got, c.want)
		}
	}
}

func TestKeyValidate(t *testing.T) {
	for _, k := range []ormlock.Key{{}, ormlock.Name(""), ormlock.Name("a\x00b"), ormlock.Name("\xff")} {
		if err := k.Validate(); !errors.Is(err, ormlock.ErrInvalidKey) {
			t.Errorf("%q: %v, want ErrInvalidKey", k.String(), err)
		}
	}
	for _, k := range []ormlock.Key{ormlock.Name("ok"), ormlock.Name(strings.Repeat("ü", 500)), ormlock.ID(0), ormlock.Pair(0, 0)} {
		if err := k.Validate(); err != nil {
			t.Errorf("%q: %v", k.String(), err)
		}
	}
}

func TestOptions(t *testing.T) {
	c := ormlock.NewConfig()
	if c.Keepalive != ormlock.DefaultKeepalive || c.LedgerTable != ormlock.DefaultLedgerTable || c.Wait != 0 || c.Err() != nil {
		t.Errorf("defaults = %+v", c)
	}
	c = c.With(ormlock.WithNamespace("billing"), ormlock.WithWait(time.Second), ormlock.WithLedgerTable("job_runs"))
	if c.Namespace != "billing" || c.Wait != time.Second || c.LedgerTable != "job_runs" {
		t.Errorf("applied = %+v", c)
	}
	for name, o := range map[string]ormlock.Option{
		"negative wait":     ormlock.WithWait(-1),
		"zero keepalive":    ormlock.WithKeepalive(0),
		"table injection":   ormlock.WithLedgerTable("runs; DROP TABLE x"),
		"empty table":       ormlock.WithLedgerTable(""),
		"long table":        ormlock.WithLedgerTable(strings.Repeat("t", 64)),
		"namespace colon":   ormlock.WithNamespace("a:b"),
		"namespace invalid": ormlock.WithNamespace("\xff"),
	} {
		if err := ormlock.NewConfig(o).Err(); err == nil || !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestNameLimits(t *testing.T) {
	if err := ormlock.Name(strings.Repeat("é", ormlock.MaxNameLen/2)).Validate(); err != nil {
		t.Errorf("name of MaxNameLen bytes: %v", err)
	}
	huge := strings.Repeat("x", 4<<20)
	for _, err := range []error{
		ormlock.Name(huge).Validate(),
		ormlock.Name(huge + "\xff").Validate(),
		ormlock.NewConfig(ormlock.WithNamespace(huge)).Err(),
		ormlock.NewConfig(ormlock.WithNamespace(strings.Repeat("n", ormlock.MaxNamespaceLen+1))).Err(),
	} {
		if !errors.Is(err, ormlock.ErrInvalidKey) || len(err.Error()) > 200 {
			t.Errorf("over the limit: %.300v (%d bytes), want a short ErrInvalidKey", err, len(err.Error()))
		}
	}
	if err := ormlock.NewConfig(ormlock.WithNamespace(strings.Repeat("n", ormlock.MaxNamespaceLen))).Err(); err != nil {
		t.Errorf("namespace of MaxNamespaceLen bytes: %v", err)
	}
	if err := ormlock.NewConfig(ormlock.WithNamespace("tenant ")).Err(); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("namespace ending with a space: %v", err)
	}
	// the longest name ormlock derives itself fits
	if err := ormlock.RunKey(strings.Repeat("日", 191), time.Now()).Validate(); err != nil {
		t.Errorf("RunKey of the longest job: %v", err)
	}
}
