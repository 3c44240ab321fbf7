package keys

import "testing"

func TestShapes(t *testing.T) {
	a, b := Name("a"), ID(42)
	if got := Elements(All(a, All(b))); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("All flattens: %v", got)
	}
	if x, y := All(a, b), All(a, b); x != y || x == All(b, a) {
		t.Error("sets: equal when built alike, in the order given")
	}
	if es := Elements(Shared(All(a, b))); !es[0].shared || !es[1].shared {
		t.Error("Shared of a set shares every key")
	}
	if s := SlotKey(Pair(7, 9), 2); s != Name("ormlock.semaphore:7:9#2") {
		t.Errorf("slot of a pair: %v", s)
	}
	if s := SlotKey(ID(42), 1); s != Name("ormlock.semaphore:42#1") {
		t.Errorf("slot of an id: %v", s)
	}
	for _, k := range []Key{All(), All(a, Semaphore(b, 2)), Semaphore(Shared(a), 2), Semaphore(a, 0), Semaphore(a, MaxSemaphore+1), Shared(Semaphore(a, 2)), All(a, Key{})} {
		if k.Validate() == nil {
			t.Errorf("%v: valid, want ErrInvalidKey", k)
		}
	}
	if err := Semaphore(a, MaxSemaphore).Validate(); err != nil {
		t.Error(err)
	}
}
