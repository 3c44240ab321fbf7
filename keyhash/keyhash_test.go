package keyhash_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

func TestSpecVectors(t *testing.T) {
	for _, c := range []struct {
		ns, name string
		want     int64
	}{
		{"", "daily-settlement", -2533923874772390729},
		{"", "a", -3848465438864589366},
		{"billing", "daily-settlement", -5142690857003189141},
	} {
		if got := keyhash.Int64NS(c.ns, c.name); got != c.want {
			t.Errorf("Int64NS(%q, %q) = %d, want %d", c.ns, c.name, got, c.want)
		}
		if c.ns == "" {
			if got := keyhash.Int64(c.name); got != c.want {
				t.Errorf("Int64(%q) = %d, want %d", c.name, got, c.want)
			}
		}
	}
	if a, b := keyhash.Pair("billing", "daily-settlement"); a != 211142636 || b != -589975127 {
		t.Errorf("Pair = (%d, %d), want (211142636, -589975127)", a, b)
	}
	// a namespace longer than the stack buffer takes the streaming path
	long := strings.Repeat("n", 300)
	if keyhash.Int64NS(long, "x") == keyhash.Int64NS(long+"x", "") {
		t.Error("namespace and name not separated by the NUL byte")
	}
}

func TestMySQLName(t *testing.T) {
	if got := keyhash.MySQLName("", "daily-settlement"); got != "daily-settlement" {
		t.Errorf("short name changed: %q", got)
	}
	if got := keyhash.MySQLName("billing", "daily-settlement"); got != "billing:daily-settlement" {
		t.Errorf("namespaced = %q", got)
	}
	exact := strings.Repeat("x", 64)
	if got := keyhash.MySQLName("", exact); got != exact {
		t.Errorf("64-byte name changed")
	}
	long := strings.Repeat("é", 100) // 200 bytes, 2-byte runes
	got := keyhash.MySQLName("", long)
	if len(got) > keyhash.MySQLMaxName || !utf8.ValidString(got) {
		t.Fatalf("long name -> %q (%d bytes, valid %v)", got, len(got), utf8.ValidString(got))
	}
	if !strings.HasPrefix(got, "éééé") || !strings.Contains(got, "~") {
		t.Errorf("long name lost its readable prefix: %q", got)
	}
	if keyhash.MySQLName("", long) != got {
		t.Error("not deterministic")
	}
	if keyhash.MySQLName("a", strings.Repeat("b", 70)) == keyhash.MySQLName("a:"+strings.Repeat("b", 35), strings.Repeat("b", 34)) {
		t.Error("namespace split not part of the digest")
	}
}

func FuzzMySQLName(f *testing.F) {
	f.Add("", "daily-settlement")
	f.Add("billing", strings.Repeat("日本語", 40))
	f.Add("ns", strings.Repeat("a", 63))
	f.Fuzz(func(t *testing.T, ns, name string) {
		if !utf8.ValidString(ns) || !utf8.ValidString(name) {
			t.Skip()
		}
		got := keyhash.MySQLName(ns, name)
		if len(got) > keyhash.MySQLMaxName {
			t.Fatalf("%d bytes", len(got))
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		if again := keyhash.MySQLName(ns, name); again != got {
			t.Fatal("not deterministic")
		}
		// a different name in the same namespace maps elsewhere
		if other := keyhash.MySQLName(ns, name+"\u00a0"); other == got {
			t.Fatalf("collision for %q and %q", name, name+"\u00a0")
		}
	})
}

func FuzzInt64(f *testing.F) {
	f.Add("", "a")
	f.Add("billing", "daily-settlement")
	f.Fuzz(func(t *testing.T, ns, name string) {
		if a, b := keyhash.Int64NS(ns, name), keyhash.Int64NS(ns, name); a != b {
			t.Fatal("not deterministic")
		}
		if ns == "" && keyhash.Int64NS(ns, name) != keyhash.Int64(name) {
			t.Fatal("empty namespace differs from none")
		}
	})
}

// names returns n test names: ASCII, punctuation, quotes and non-ASCII.
func names(n int) []string {
	base := []string{"daily-settlement", "a", "it's", `"quoted"`, "semi;colon", "--dash", "Zürich", "日本語のロック", "🔒 emoji", "tab\there", strings.Repeat("long", 100), "Ωmega", "ñandú", "Привет", "עברית"}
	out := make([]string, 0, n)
	for i := 0; len(out) < n; i++ {
		out = append(out, fmt.Sprintf("%s-%d", base[i%len(base)], i))
	}
	return out
}

// TestSQLExpressionMatches checks Go against the psql expression that the
// package documentation gives operators, on the real server.
func TestSQLExpressionMatches(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres)
	for _, name := range names(250) {
		var got int64
		err := db.QueryRow(`SELECT ('x'||left(encode(sha256(convert_to($1::text,'UTF8')),'hex'),16))::bit(64)::bigint`, name).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if want := keyhash.Int64(name); got != want {
			t.Fatalf("%q: SQL %d, Go %d", name, got, want)
		}
	}
}

func BenchmarkInt64(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = keyhash.Int64("daily-settlement")
	}
}

func BenchmarkInt64NS(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = keyhash.Int64NS("billing", "daily-settlement")
	}
}

func TestInt64DoesNotAllocate(t *testing.T) {
	name := strings.Repeat("x", 200)
	if n := testing.AllocsPerRun(100, func() { _ = keyhash.Int64(name) }); n != 0 {
		t.Errorf("Int64 allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = keyhash.Int64NS("billing", name) }); n != 0 {
		t.Errorf("Int64NS allocates %v times", n)
	}
}

// TestSemaphoreSlotVectors pins the slot names of ormlock.Semaphore (an
// addition to spec v1) and their keys, and checks them against the psql
// expression of PROTOCOL.md (Lock shapes).
func TestSemaphoreSlotVectors(t *testing.T) {
	db := testdb.Open(t, testdb.Postgres)
	for _, c := range []struct {
		text     string
		i        int
		name     string
		key, nsd int64 // Int64NS("", name), Int64NS("billing", name)
	}{
		{"export", 3, "ormlock.semaphore:export#3", 3402446500341471459, 8225848454812532478},
		{"42", 1, "ormlock.semaphore:42#1", -3576420396448905788, 1316246877074601098},
		{"7:9", 2, "ormlock.semaphore:7:9#2", 6484238711088732973, -337952310236555302},
	} {
		name := keyhash.SemaphoreSlot(c.text, c.i)
		if name != c.name {
			t.Errorf("SemaphoreSlot(%q, %d) = %q, want %q", c.text, c.i, name, c.name)
		}
		if got := keyhash.Int64NS("", name); got != c.key {
			t.Errorf("Int64(%q) = %d, want %d", name, got, c.key)
		}
		if got := keyhash.Int64NS("billing", name); got != c.nsd {
			t.Errorf("Int64NS(billing, %q) = %d, want %d", name, got, c.nsd)
		}
		var sqlKey int64
		if err := db.QueryRow(`SELECT ('x'||left(encode(sha256(convert_to($1::text,'UTF8')),'hex'),16))::bit(64)::bigint`, name).Scan(&sqlKey); err != nil {
			t.Fatal(err)
		}
		if sqlKey != c.key {
			t.Errorf("%q: SQL %d, Go %d", name, sqlKey, c.key)
		}
	}
}
