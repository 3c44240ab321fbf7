package keys_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/keyhash"
)

func TestKeyForms(t *testing.T) {
	if k := keys.Of[ormlock.Key]("daily-settlement"); k != keys.Key(ormlock.Name("daily-settlement")) || !keys.IsName(keys.Key(k)) {
		t.Errorf("string -> %v", k)
	}
	if k := keys.Of[ormlock.Key](int64(42)); k != keys.Key(ormlock.ID(42)) {
		t.Errorf("int64 -> %v", k)
	}
	if k := keys.Of[ormlock.Key](42); k != keys.Key(ormlock.ID(42)) {
		t.Errorf("int -> %v", k)
	}
	if k := keys.Of[ormlock.Key](ormlock.Pair(1, 2)); !keys.IsPair(keys.Key(k)) || k.String() != "pair:1,2" {
		t.Errorf("pair -> %v", k)
	}

	pg := keys.Postgres(keys.Name("daily-settlement"), "")
	if pg.IsPair || pg.Int64 != -2533923874772390729 {
		t.Errorf("name on postgres = %+v", pg)
	}
	if got := keys.Postgres(keys.Name("daily-settlement"), "billing").Int64; got != keyhash.Int64NS("billing", "daily-settlement") {
		t.Errorf("namespaced name = %d", got)
	}
	if got := keys.Postgres(keys.ID(12345), "billing"); got.Int64 != 12345 || got.IsPair {
		t.Errorf("id ignores namespace on postgres: %+v", got)
	}
	if got := keys.Postgres(keys.Pair(3, -4), ""); !got.IsPair || got.ClassID != 3 || got.ObjID != -4 {
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
		if got := keys.MySQL(keys.Key(c.k), c.ns); got != c.want {
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
	c := config.New()
	if c.Keepalive != config.DefaultKeepalive || c.LedgerTable != config.DefaultLedgerTable || c.Wait != 0 || c.Err() != nil {
		t.Errorf("defaults = %+v", c)
	}
	// 0 is the documented default, and undoes an earlier n for one call
	if c := config.New(ormlock.WithSharedLockConns(4), ormlock.WithSharedLockConns(0)); c.Err() != nil || c.SharedConns != 0 {
		t.Errorf("WithSharedLockConns(0) after 4: SharedConns %d, err %v; want the default, 0", c.SharedConns, c.Err())
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
		"negative shared":   ormlock.WithSharedLockConns(-1),
	} {
		if err := config.New(o).Err(); err == nil || !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestNameLimits(t *testing.T) {
	if err := ormlock.Name(strings.Repeat("é", keys.MaxNameLen/2)).Validate(); err != nil {
		t.Errorf("name of MaxNameLen bytes: %v", err)
	}
	huge := strings.Repeat("x", 4<<20)
	for _, err := range []error{
		ormlock.Name(huge).Validate(),
		ormlock.Name(huge + "\xff").Validate(),
		config.New(ormlock.WithNamespace(huge)).Err(),
		config.New(ormlock.WithNamespace(strings.Repeat("n", keys.MaxNamespaceLen+1))).Err(),
	} {
		if !errors.Is(err, ormlock.ErrInvalidKey) || len(err.Error()) > 200 {
			t.Errorf("over the limit: %.300v (%d bytes), want a short ErrInvalidKey", err, len(err.Error()))
		}
	}
	if err := config.New(ormlock.WithNamespace(strings.Repeat("n", keys.MaxNamespaceLen))).Err(); err != nil {
		t.Errorf("namespace of MaxNamespaceLen bytes: %v", err)
	}
	if err := config.New(ormlock.WithNamespace("tenant ")).Err(); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("namespace ending with a space: %v", err)
	}
	// the longest name ormlock derives itself fits
	if err := ormlock.RunKey(strings.Repeat("日", 191), time.Now()).Validate(); err != nil {
		t.Errorf("RunKey of the longest job: %v", err)
	}
}

func TestRunKey(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("time zone data: %v", err)
	}
	slot := time.Date(2025, 3, 31, 0, 0, 0, 123456789, berlin)
	k := ormlock.RunKey("daily-settlement", slot)
	if got, want := keys.NameValue(keys.Key(k)), "ormlock.runonce:daily-settlement@2025-03-30T22:00:00.123456Z"; got != want {
		t.Fatalf("RunKey = %q, want %q", got, want)
	}
	// the same instant in another zone, and with a monotonic reading, is the
	// same key
	if k2 := ormlock.RunKey("daily-settlement", slot.UTC().Round(0)); k2 != k {
		t.Fatalf("RunKey depends on the location: %v vs %v", k2, k)
	}
	if got := keys.NormalizeSlot(slot); got.Location() != time.UTC || got.Nanosecond() != 123456000 {
		t.Fatalf("NormalizeSlot = %v", got)
	}
}

// The root package states the limits in the docs of ormlock.Name and
// ormlock.WithNamespace; they must be the ones the keys enforce.
func TestLimitsDocumented(t *testing.T) {
	for file, want := range map[string]string{
		"../../key.go":     fmt.Sprintf("at most %s bytes", thousands(keys.MaxNameLen)),
		"../../options.go": fmt.Sprintf("at most %d bytes", keys.MaxNamespaceLen),
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " "), want) {
			t.Errorf("%s does not say %q", file, want)
		}
	}
	if errs.ErrInvalidKey != ormlock.ErrInvalidKey || errs.ErrInvalidArgument != ormlock.ErrInvalidArgument {
		t.Fatal("the root sentinels differ from internal/errs")
	}
}

// thousands writes n with a comma every three digits, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
