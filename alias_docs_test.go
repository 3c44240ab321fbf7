package ormlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
)

// aliased are the root's types that are aliases of a type defined under
// internal/ (doc.go, Where the types live), each with its reflect.Type.
var aliased = map[string]reflect.Type{
	"Action":        reflect.TypeFor[ormlock.Action](),
	"ActionKind":    reflect.TypeFor[ormlock.ActionKind](),
	"ActionRecord":  reflect.TypeFor[ormlock.ActionRecord](),
	"CatchUpPolicy": reflect.TypeFor[ormlock.CatchUpPolicy](),
	"Event":         reflect.TypeFor[ormlock.Event](),
	"EventHook":     reflect.TypeFor[ormlock.EventHook](),
	"EventKind":     reflect.TypeFor[ormlock.EventKind](),
	"HolderInfo":    reflect.TypeFor[ormlock.HolderInfo](),
	"Hook":          reflect.TypeFor[ormlock.Hook](),
	"JobControl":    reflect.TypeFor[ormlock.JobControl](),
	"KeepaliveHook": reflect.TypeFor[ormlock.KeepaliveHook](),
	"Key":           reflect.TypeFor[ormlock.Key](),
	"Observer":      reflect.TypeFor[ormlock.Observer](),
	"ObserverFunc":  reflect.TypeFor[ormlock.ObserverFunc](),
	"Option":        reflect.TypeFor[ormlock.Option](),
	"PanicError":    reflect.TypeFor[ormlock.PanicError](),
	"RateUsage":     reflect.TypeFor[ormlock.RateUsage](),
	"Run":           reflect.TypeFor[ormlock.Run](),
}

// TestAliasDocs: go doc shows an alias with its own comment only, not the
// fields and methods of the type it names; so the comment of each of the
// root's aliases names every exported field and method of its type (the
// structs and interfaces show theirs in a code block), and a field or
// method added under internal/ fails here until the root's doc has it.
func TestAliasDocs(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, p := range files {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	docs := map[string]string{}
	for _, f := range parsed {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !ts.Assign.IsValid() || !ts.Name.IsExported() {
					continue
				}
				doc := ts.Doc
				if doc == nil {
					doc = g.Doc
				}
				docs[ts.Name.Name] = doc.Text()
			}
		}
	}
	var names []string
	for n := range docs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		typ, ok := aliased[n]
		if !ok {
			t.Errorf("%s is an alias the test does not know: add it to aliased", n)
			continue
		}
		var want []string
		if typ.Kind() == reflect.Struct || typ.Kind() == reflect.Interface {
			checkBlock(t, n, typ, docs[n])
		}
		for _, ty := range []reflect.Type{typ, reflect.PointerTo(typ)} {
			if typ.Kind() == reflect.Interface {
				break // its code block shows them
			}
			for i := range ty.NumMethod() {
				if m := ty.Method(i); !slices.Contains(want, m.Name) {
					want = append(want, m.Name)
				}
			}
		}
		for _, w := range want {
			if !regexp.MustCompile(`\b` + w + `\b`).MatchString(docs[n]) {
				t.Errorf("the doc of ormlock.%s does not name its %s", n, w)
			}
		}
	}
	for n := range aliased {
		if _, ok := docs[n]; !ok {
			t.Errorf("aliased names %s, which is not an alias in the root", n)
		}
	}
}

// checkBlock checks the code block of the doc of the alias n, whose type
// typ is a struct or an interface: it declares "type n struct" (or
// interface) with exactly typ's exported fields, in order, or its
// methods, less those of the interfaces it embeds.
func checkBlock(t *testing.T, n string, typ reflect.Type, doc string) {
	t.Helper()
	var code strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "\t") {
			code.WriteString(l[1:] + "\n")
		}
	}
	f, err := parser.ParseFile(token.NewFileSet(), n+".go", "package p\n"+code.String(), 0)
	if err != nil {
		t.Errorf("the code block of ormlock.%s does not parse: %v", n, err)
		return
	}
	var got, want []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, sp := range g.Specs {
			ts := sp.(*ast.TypeSpec)
			if ts.Name.Name != n {
				continue
			}
			var list *ast.FieldList
			switch x := ts.Type.(type) {
			case *ast.StructType:
				list = x.Fields
			case *ast.InterfaceType:
				list = x.Methods
			}
			for _, fl := range list.List {
				for _, id := range fl.Names {
					got = append(got, id.Name)
				}
				if len(fl.Names) == 0 { // an embedded interface
					got = append(got, fl.Type.(*ast.Ident).Name)
				}
			}
		}
	}
	if typ.Kind() == reflect.Struct {
		for i := range typ.NumField() {
			if fd := typ.Field(i); fd.IsExported() {
				want = append(want, fd.Name)
			}
		}
	} else {
		for i := range typ.NumMethod() {
			want = append(want, typ.Method(i).Name)
		}
		var own []string
		for _, g := range got {
			if et, ok := aliased[g]; ok && et.Kind() == reflect.Interface {
				want = slices.DeleteFunc(want, func(m string) bool { _, ok := et.MethodByName(m); return ok })
				continue
			}
			own = append(own, g)
		}
		got = own
		slices.Sort(got)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the code block of ormlock.%s declares %v; its type has %v", n, got, want)
	}
}
