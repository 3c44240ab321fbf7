package lockproto

import (
	"strconv"
	"strings"
	"time"
)

// A shape tried once (All, Semaphore) as a prepared statement: on a direct
// connection (prepared.go), the one CASE statement of a set or a semaphore
// (pgshape.go) is prepared once per connection, with one parameter per
// key, and run by EXECUTE in the message that begins the transaction, as
// the single key's try is: the server then parses only the EXECUTE, where
// the CASE statement was parsed and planned on every call. The statement is
// the text path's, with $n in place of the key literals, so its order of
// evaluation is the same; its answer carries the connection's mark, and a
// statement gone or not the library's is prepared again in the call
// (execPrepared). One statement per kind of shape, kind of key and number
// of keys, named after them:
//
//	BEGIN; EXECUTE ormlock_pg_try_semaphore_int8_10(s1, …, s10)
//
// A wait, a Session, a shape with a shared key or with keys of both kinds,
// and a connection behind a pooler keep the text message; so do shapes of
// more than pgShapePreparedMax keys, and the shapes of a connection that
// has prepared pgShapeStmtsMax of them already (the server keeps each
// statement for the connection's life).
const (
	pgShapePreparedMax = 64
	pgShapeStmtsMax    = 16
)

// pgShapePrepared returns the name of the prepared statement that tries
// t once, and whether t has one.
func pgShapePrepared(t Target) (string, bool) {
	if !t.several() || len(t.items) > pgShapePreparedMax {
		return "", false
	}
	pair := t.items[0].pg.IsPair
	for _, it := range t.items {
		if it.shared || it.pg.IsPair != pair {
			return "", false
		}
	}
	name := "ormlock_pg_try_all_"
	if t.anyOne() {
		name = "ormlock_pg_try_semaphore_"
	}
	if pair {
		name += "int4_"
	} else {
		name += "int8_"
	}
	return name + strconv.Itoa(len(t.items)), true
}

// pgShapePreparedMessage is the one message of t's prepared try (named
// name, pgShapePrepared) on a direct connection: BEGIN, the PREPARE (with
// the connection's mark) when prepare is set, and the EXECUTE.
func pgShapePreparedMessage(begin, name string, t Target, prepare bool, mark int64) string {
	var b strings.Builder
	b.Grow(len(begin) + 64 + 24*len(t.items) + 96*len(t.items)*btoi(prepare))
	b.WriteString(begin)
	if prepare {
		pgShapePrepare(&b, name, t, mark)
	}
	b.WriteString("; EXECUTE ")
	b.WriteString(name)
	var num [24]byte
	for i, it := range t.items {
		if i == 0 {
			b.WriteString("(")
		} else {
			b.WriteString(", ")
		}
		if it.pg.IsPair {
			b.Write(strconv.AppendInt(num[:0], int64(it.pg.ClassID), 10))
			b.WriteString(", ")
			b.Write(strconv.AppendInt(num[:0], int64(it.pg.ObjID), 10))
		} else {
			b.Write(strconv.AppendInt(num[:0], it.pg.Int64, 10))
		}
	}
	b.WriteString(")")
	return b.String()
}

// pgShapePrepare writes "; PREPARE name(types) AS SELECT CASE …,
// current_setting('transaction_isolation'), mark::int8".
func pgShapePrepare(b *strings.Builder, name string, t Target, mark int64) {
	b.WriteString("; PREPARE ")
	b.WriteString(name)
	typ, per := "int8", 1
	if t.items[0].pg.IsPair {
		typ, per = "int4", 2
	}
	for i := range len(t.items) * per {
		if i == 0 {
			b.WriteString("(")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(typ)
	}
	b.WriteString(") AS SELECT CASE")
	for i := range t.items {
		b.WriteString(" WHEN ")
		if !t.anyOne() {
			b.WriteString("NOT ")
		}
		b.WriteString("pg_try_advisory_xact_lock($")
		b.WriteString(strconv.Itoa(i*per + 1))
		if per == 2 {
			b.WriteString(", $")
			b.WriteString(strconv.Itoa(i*per + 2))
		}
		b.WriteString(") THEN ")
		if t.anyOne() {
			b.WriteString(strconv.Itoa(i + 1))
		} else {
			b.WriteString("false")
		}
	}
	if t.anyOne() {
		b.WriteString(" ELSE 0 END")
	} else {
		b.WriteString(" ELSE true END")
	}
	b.WriteString(", current_setting('transaction_isolation'), ")
	b.WriteString(strconv.FormatInt(mark, 10))
	b.WriteString("::int8")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lockShapePrepared takes shape o.target once by its prepared statement
// name on the direct connection x.pc whose record is ps, in the message
// that begins the transaction with begin. It reports false, having sent
// nothing, when the connection has prepared its share of shapes already.
func lockShapePrepared(o *Op, x *lockExchange, ps *pgConnState, name, begin string) (bool, error) {
	prepared := ps.shapes[name]
	if prepared == nil {
		if len(ps.shapes) >= pgShapeStmtsMax {
			return false, nil
		}
		if ps.shapes == nil {
			ps.shapes = make(map[string]*bool)
		}
		prepared = new(bool)
		ps.shapes[name] = prepared
	}
	return true, execPrepared(x, ps, prepared, name, lockLayout{iso: true, mark: true, slot: o.target.anyOne()},
		func(prepare bool) string { return pgShapePreparedMessage(begin, name, o.target, prepare, ps.mark) })
}

// lockShape sends the message that begins the transaction and takes shape
// o.target: tried once on a direct connection, the prepared statement;
// otherwise the text (pgShapeMessage), which on a connection not known yet
// to be direct also reads the backend's pid (as a single key's first lock
// does, onemsg.go).
func lockShape(o *Op, x *lockExchange, begin string, use lockTxFor, wait time.Duration, long, wantIso bool) error {
	var ps *pgConnState
	if use == forFn && wait == 0 {
		ps = pgConnStateOf(x.pc)
	}
	if ps != nil && ps.known && ps.direct {
		if name, ok := pgShapePrepared(o.target); ok {
			if sent, err := lockShapePrepared(o, x, ps, name, begin); sent {
				return err
			}
		}
	}
	msg, l := pgShapeMessage(begin, o.target, wait, long, wantIso)
	if ps == nil || ps.known {
		return x.send(msg, l)
	}
	l.pid = true
	err := x.send(msg+", pg_backend_pid()", l)
	if err == nil {
		ps.known, ps.direct = true, x.rep.pid != 0 && x.rep.pid == x.pc.PID()
	}
	return err
}
