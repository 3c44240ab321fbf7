package schedtest_test

// TestREADMESnippets type-checks every ```go block of the repository's
// README.md, docs/TROUBLESHOOTING.md and docs/MIGRATING.md, so that a
// snippet that no longer compiles fails CI. It lives in
// the scheduler module because that module can import everything the README
// shows (the library, gocron, robfig/cron, GORM, ent, pgx).
//
// Conventions for README blocks:
//
//   - A block with top-level declarations (import, func, type, var, const)
//     is a file without its package clause; one with a package clause is a
//     whole file. Anything else is a function body (statements); a body
//     that returns a value is the body of a function returning an error.
//   - A function body, or a file block without an import declaration, may
//     use the packages of snippetImports (ormlock, the adapters and the
//     scheduler backends, keyhash, gocron, cron (robfig), gorm, pgx,
//     pgxpool, ent (the stand-in), dialect, entsql, and slog, log, os,
//     time, context, errors, fmt and sql) without importing them.
//   - Identifiers the quickstarts introduce may be used without declaring
//     them when a block does not declare them itself: db (*gorm.DB), client
//     (*ent.Client), ctx, berlin (*time.Location), logger (*slog.Logger),
//     settle (func(*gorm.DB) error) and today (func() time.Time).
//   - "example.com/app/ent", the user's generated ent client, is a stand-in
//     with a Settlement entity (a day field).
//   - A block that must not be checked (pseudo-code) is fenced as ```text,
//     not ```go. A Go block that needs a module this one does not require
//     (the other lock library of a MIGRATING.md "before") is fenced as
//     ```go before: rendered as Go, not checked. Any other info string
//     that begins with go is an error, so that a typo does not skip a
//     block in silence.
//
// Each block is built as a package of its own in a scratch module that
// replaces the ormlock modules with this checkout; `go vet` reports errors
// at the document's own line numbers.

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type snippet struct {
	file string // the document, relative to the repository's root
	line int    // its line of the block's first line
	text string
}

// snippetDocs are the documents whose ```go blocks are checked.
var snippetDocs = []string{"README.md", "docs/TROUBLESHOOTING.md", "docs/MIGRATING.md"}

// readmeSnippets returns the ```go blocks of the document file.
func readmeSnippets(t *testing.T, file, readme string) []snippet {
	t.Helper()
	var out []snippet
	var cur *snippet
	var body []string
	skipping := false // inside a ```go before block
	for i, l := range strings.Split(readme, "\n") {
		info := strings.TrimSpace(l)
		switch {
		case skipping:
			skipping = info != "```"
		case cur == nil && info == "```go":
			cur = &snippet{file: file, line: i + 2}
			body = nil
		case cur == nil && strings.Join(strings.Fields(info), " ") == "```go before":
			skipping = true
		case cur == nil && strings.HasPrefix(info, "```go"):
			t.Errorf("%s:%d: fence %q: a Go block is fenced ```go (checked) or ```go before (not checked)", file, i+1, info)
		case cur != nil && info == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body = append(body, l)
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unterminated ```go block", file, cur.line-1)
	}
	if skipping {
		t.Fatalf("%s: unterminated ```go before block", file)
	}
	return out
}

var snippetImports = map[string]string{
	"ormlock": "github.com/ormlock/ormlock", "gormlock": "github.com/ormlock/ormlock/gormlock",
	"entlock": "github.com/ormlock/ormlock/entlock", "scheduler": "github.com/ormlock/ormlock/scheduler",
	"gormsched": "github.com/ormlock/ormlock/scheduler/gormsched", "entsched": "github.com/ormlock/ormlock/scheduler/entsched",
	"keyhash": "github.com/ormlock/ormlock/keyhash", "gocron": "github.com/go-co-op/gocron/v2",
	"cron": "github.com/robfig/cron/v3", "gorm": "gorm.io/gorm", "slog": "log/slog", "log": "log",
	"os": "os", "time": "time", "context": "context", "errors": "errors", "fmt": "fmt", "sql": "database/sql",
	"sqllock": "github.com/ormlock/ormlock/sqllock", "pgxlock": "github.com/ormlock/ormlock/pgxlock",
	"sqlsched": "github.com/ormlock/ormlock/scheduler/sqlsched", "pgxsched": "github.com/ormlock/ormlock/scheduler/pgxsched",
	"pgx": "github.com/jackc/pgx/v5", "pgxpool": "github.com/jackc/pgx/v5/pgxpool",
	"ent": "example.com/app/ent", "dialect": "entgo.io/ent/dialect", "entsql": "entsql entgo.io/ent/dialect/sql",
}

// snippetPrelude: identifier -> declaration and the imports it needs.
var snippetPrelude = map[string][2]string{
	"db":     {"var db *gorm.DB", "gorm.io/gorm"},
	"client": {"var client *ent.Client", "example.com/app/ent"},
	"ctx":    {"var ctx = context.Background()", "context"},
	"berlin": {"var berlin = time.UTC", "time"},
	"logger": {"var logger = slog.Default()", "log/slog"},
	"settle": {"func settle(db *gorm.DB) error { return nil }", "gorm.io/gorm"},
	"today":  {"func today() time.Time { return time.Now() }", "time"},
}

// stubEnt stands in for a generated ent client with a Settlement entity.
const stubEnt = `// Package ent stands in for a generated ent client (README snippets).
package ent

import (
	"context"
	"time"

	"entgo.io/ent/dialect"
)

type config struct{ driver dialect.Driver }

// Option configures the client.
type Option func(*config)

// Driver sets the driver.
func Driver(d dialect.Driver) Option { return func(c *config) { c.driver = d } }

// Client is the client.
type Client struct {
	config
	Settlement *SettlementClient
}

// NewClient returns a client.
func NewClient(opts ...Option) *Client {
	c := &Client{Settlement: &SettlementClient{}}
	for _, o := range opts {
		o(&c.config)
	}
	return c
}

// Tx begins a transaction.
func (c *Client) Tx(context.Context) (*Tx, error) { return &Tx{Settlement: c.Settlement}, nil }

// Close closes the client.
func (c *Client) Close() error { return nil }

// Tx is a transaction.
type Tx struct{ Settlement *SettlementClient }

// Commit commits.
func (*Tx) Commit() error { return nil }

// Rollback rolls back.
func (*Tx) Rollback() error { return nil }

// Client returns a client bound to the transaction.
func (tx *Tx) Client() *Client { return &Client{Settlement: tx.Settlement} }

// SettlementClient is the Settlement entity's client.
type SettlementClient struct{}

// Create builds a Settlement.
func (*SettlementClient) Create() *SettlementCreate { return &SettlementCreate{} }

// SettlementCreate is a builder.
type SettlementCreate struct{ day time.Time }

// SetDay sets the day.
func (c *SettlementCreate) SetDay(d time.Time) *SettlementCreate { c.day = d; return c }

// Exec saves the entity.
func (*SettlementCreate) Exec(context.Context) error { return nil }
`

func TestREADMESnippets(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build README.md's snippets: %v", err)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	var snippets []snippet
	for _, file := range snippetDocs {
		text, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		got := readmeSnippets(t, file, string(text))
		if len(got) == 0 {
			t.Fatalf("%s has no ```go blocks", file)
		}
		snippets = append(snippets, got...)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// the scratch module: this module's requirements, the checkout's modules
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gomod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(mod), "module example.com/app")
	gomod = regexp.MustCompile(`(?m)^replace .*$`).ReplaceAllString(gomod, "")
	gomod += fmt.Sprintf("\nrequire github.com/ormlock/ormlock/scheduler v0.0.0-00010101000000-000000000000\n"+
		"replace github.com/ormlock/ormlock => %s\nreplace github.com/ormlock/ormlock/scheduler => %s\n",
		root, filepath.Join(root, "scheduler"))
	write("go.mod", gomod)
	sum, err := os.ReadFile("../../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))
	write("ent/ent.go", stubEnt)

	for i, s := range snippets {
		pkg := fmt.Sprintf("s%02d", i)
		src, prelude, err := snippetFiles(pkg, s)
		if err != nil {
			t.Errorf("%s:%d: %v", s.file, s.line, err)
			continue
		}
		write(pkg+"/snippet.go", src)
		write(pkg+"/prelude.go", prelude)
	}
	cmd := exec.Command(goBin, "vet", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the documents' Go snippets do not build (%v):\n%s", err, out.String())
	}
	t.Logf("%d snippets of %v type-check", len(snippets), snippetDocs)
}

// snippetFiles turns a README block into the source of package pkg and
// of a prelude file for it, following the conventions at the top of this
// file.
func snippetFiles(pkg string, s snippet) (src, prelude string, err error) {
	packageClause := regexp.MustCompile(`(?m)^package \w+`)
	text := packageClause.ReplaceAllString(s.text, "//") // keeps the line numbers
	f, perr := parser.ParseFile(token.NewFileSet(), "", "package p\n"+text, 0)
	isFile := perr == nil && len(f.Decls) > 0
	if packageClause.MatchString(s.text) && !isFile {
		return "", "", fmt.Errorf("a block with a package clause must be a Go file: %v", perr)
	}
	declared := map[string]bool{}
	if isFile {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declared[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							declared[n.Name] = true
						}
					case *ast.TypeSpec:
						declared[sp.Name.Name] = true
					}
				}
			}
		}
	}
	var decls []string
	preImports := map[string]bool{}
	for name, decl := range snippetPrelude {
		if !declared[name] && regexp.MustCompile(`\b`+name+`\b`).MatchString(text) {
			decls = append(decls, decl[0])
			preImports[decl[1]] = true
		}
	}
	prelude = fmt.Sprintf("package %s\n\n%s\n%s\n", pkg, importBlock(preImports), strings.Join(decls, "\n"))
	imports := map[string]bool{}
	for name, path := range snippetImports {
		if regexp.MustCompile(`\b` + name + `\.`).MatchString(text) {
			imports[path] = true
		}
	}
	if isFile {
		if len(f.Imports) > 0 {
			imports = nil // the block imports what it uses itself
		}
		return fmt.Sprintf("package %s\n\n%s//line %s:%d\n%s", pkg, importBlock(imports), s.file, s.line, text), prelude, nil
	}
	// A body that returns a value (`return err`) is the body of a function
	// returning an error; it gets a final `return nil` unless it ends with
	// a return of its own.
	sig, tail := "", ""
	if regexp.MustCompile(`\breturn\s+\S`).MatchString(text) {
		sig = " error"
		if lines := strings.Split(strings.TrimSpace(text), "\n"); !strings.HasPrefix(strings.TrimSpace(lines[len(lines)-1]), "return") {
			tail = "return nil\n"
		}
	}
	return fmt.Sprintf("package %s\n\n%s\nfunc _()%s {\n//line %s:%d\n%s%s}\n", pkg, importBlock(imports), sig, s.file, s.line, text, tail), prelude, nil
}

func importBlock(paths map[string]bool) string {
	if len(paths) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("import (\n")
	for p := range paths {
		if name, path, ok := strings.Cut(p, " "); ok { // "alias path"
			fmt.Fprintf(&b, "\t%s %q\n", name, path)
			continue
		}
		fmt.Fprintf(&b, "\t%q\n", p)
	}
	b.WriteString(")\n")
	return b.String()
}
