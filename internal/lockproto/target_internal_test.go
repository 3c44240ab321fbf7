package lockproto

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/keys"
)

// MySQLLockIdentity is never less strict than a server that lower-cases
// lock names (MySQL 5.7 and later) or compares them by case folding, nor
// than one that compares bytes (MariaDB): every rune shares its identity
// with its lower case and with every rune of its case folding orbit, and
// the ASCII fast path agrees with the general one.
func TestMySQLLockIdentityCoarse(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		id := foldRune(r)
		if l := unicode.ToLower(r); foldRune(l) != id {
			t.Fatalf("%U: identity %U, its lower case %U's %U", r, id, l, foldRune(l))
		}
		if f := unicode.SimpleFold(r); foldRune(f) != id {
			t.Fatalf("%U: identity %U, its fold %U's %U", r, id, f, foldRune(f))
		}
		if foldRune(id) != id {
			t.Fatalf("%U: identity %U is not its own (%U)", r, id, foldRune(id))
		}
	}
	for _, c := range [][2]string{{"Job", "job"}, {"CAFÉ", "café"}, {"STRAẞE", "straße"}, {"\u212a", "k"}, {"ſ", "s"}, {"İ", "i"}, {"ǅ", "Ǆ"}} {
		if a, b := MySQLLockIdentity(c[0]), MySQLLockIdentity(c[1]); a != b {
			t.Errorf("%q: %q, %q: %q", c[0], a, c[1], b)
		}
	}
	for _, c := range [][2]string{{"café", "cafe"}, {"straße", "strasse"}, {"job", "job "}, {"a\u0301", "á"}} {
		if a, b := MySQLLockIdentity(c[0]), MySQLLockIdentity(c[1]); a == b {
			t.Errorf("%q and %q share identity %q: no supported server takes them for one lock", c[0], c[1], a)
		}
	}
	if s := "already-lower-ascii"; MySQLLockIdentity(s) != s || strings.ToLower(s) != s {
		t.Fatal("an ASCII lower-case name is its own identity")
	}
}

// A plain key and the item of a shape that resolve to one GET_LOCK name
// reserve one identity (the defect: the plain key reserved its raw name).
func TestReservationOneIdentity(t *testing.T) {
	for _, d := range []Dialect{MySQL, Postgres} {
		plain := &Op{Dialect: d}
		var err error
		if plain.target, err = newTarget(d, keys.Name("ormlock.semaphore:Exp#1"), "NS"); err != nil {
			t.Fatal(err)
		}
		sem, err := newTarget(d, keys.Semaphore(keys.Name("Exp"), 1), "NS")
		if err != nil {
			t.Fatal(err)
		}
		if a, b := plain.target.lockKey(), sem.mech.local(sem.items[0]).key; a != b {
			t.Errorf("dialect %d: Name(slot) reserves %v, Semaphore's slot %v", d, a, b)
		}
	}
}
