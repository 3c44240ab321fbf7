package ormlock_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A reference to a section of the docs is written "docs/<file>.md
// (Section)". Section names a heading of that file: its whole text, its
// text up to its colon ("The ledger" for "The ledger: Migrate, Runs,
// Prune"), or a heading path "A, B", B being a heading below A. Several
// sections are separated by "; ", and a section may hold one level of
// parentheses ("Locker (gocron)"). Inside parentheses a reference may
// also be written "(docs/<file>.md, Section)" or "(docs/<file>.md,
// Section; more)": Section is then what comes before the ")" or ";". A
// reference without a section still has to name an existing file.
var docRef = regexp.MustCompile(`docs/([A-Za-z0-9_.-]+\.md)(?:\x60)?(?: \(((?:[^()]|\([^()]*\))*)\)|, ((?:[^();.]|\([^()]*\))+)[);])?`)

// TestDocReferences checks every docs reference in the repository's Go
// files (every module, comments and strings alike) and in README.md and
// docs/*.md: the file exists, and each section it names is one of the
// file's headings.
func TestDocReferences(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found: the test must run in the repository's root")
	}
	headings := map[string][]heading{}
	for _, p := range docs {
		hs, err := readHeadings(p)
		if err != nil {
			t.Fatal(err)
		}
		headings[filepath.Base(p)] = hs
	}

	sources := append([]string{"README.md"}, docs...)
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != "." && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			sources = append(sources, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	refs := 0
	for _, p := range sources {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := flatten(string(b), strings.HasSuffix(p, ".go"))
		for _, ix := range docRef.FindAllStringSubmatchIndex(text, -1) {
			refs++
			m := []string{text[ix[0]:ix[1]], text[ix[2]:ix[3]], ""}
			for g := 4; g <= 6; g += 2 {
				if ix[g] >= 0 {
					m[2] = text[ix[g]:ix[g+1]]
				}
			}
			file, sections := m[1], m[2]
			hs, ok := headings[file]
			if !ok {
				t.Errorf("%s: %q names docs/%s, which does not exist", p, m[0], file)
				continue
			}
			if sections == "" {
				if strings.HasPrefix(text[ix[1]:], " (") {
					t.Errorf("%s: %q is followed by a parenthesis the check cannot read (unclosed, or nested twice)", p, text[ix[0]:min(len(text), ix[1]+60)])
				}
				continue
			}
			for _, s := range strings.Split(sections, "; ") {
				if !matchPath(hs, 0, len(hs), -1, s) {
					t.Errorf("%s: %q: docs/%s has no heading %q", p, m[0], file, s)
				}
			}
		}
	}
	if refs == 0 {
		t.Fatal("no docs reference found: the scan is broken")
	}
}

// A heading of a Markdown file: its level (1 for "#") and its text.
type heading struct {
	level int
	text  string
}

// readHeadings returns the ATX headings of the Markdown file p, outside
// fenced code blocks, with their inline code marks removed.
func readHeadings(p string) ([]heading, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hs []heading
	fence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		rest := line[level:]
		if level > 6 || !strings.HasPrefix(rest, " ") {
			continue
		}
		text := strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "#"))
		text = strings.ReplaceAll(text, "`", "")
		hs = append(hs, heading{level, strings.Join(strings.Fields(text), " ")})
	}
	return hs, sc.Err()
}

// flatten joins the lines of a file into one line, with runs of white
// space as one space, so that a reference broken across lines reads as
// one. In a Go file the comment marks at the start of a line go too.
func flatten(s string, goFile bool) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if goFile {
			l = strings.TrimPrefix(l, "//")
		}
		lines[i] = l
	}
	return strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
}

// nameMatches reports whether s names the heading text h: all of it, or
// its text up to its colon.
func nameMatches(h, s string) bool {
	if h == s {
		return true
	}
	i := strings.Index(h, ":")
	return i > 0 && strings.TrimSpace(h[:i]) == s
}

// matchPath reports whether s names one of the headings hs[from:to]
// deeper than level, or is a path "A, B, ..." whose first part names such
// a heading and whose rest names a heading below it. A heading's text may
// itself contain ", ", so every split is tried.
func matchPath(hs []heading, from, to, level int, s string) bool {
	for i := from; i < to; i++ {
		h := hs[i]
		if h.level <= level {
			continue
		}
		if nameMatches(h.text, s) {
			return true
		}
		// The headings below hs[i]: up to the next one at its level or above.
		end := i + 1
		for end < to && hs[end].level > h.level {
			end++
		}
		for j := strings.Index(s, ", "); j >= 0; {
			if nameMatches(h.text, s[:j]) && matchPath(hs, i+1, end, h.level, s[j+2:]) {
				return true
			}
			k := strings.Index(s[j+2:], ", ")
			if k < 0 {
				break
			}
			j += 2 + k
		}
	}
	return false
}

// mdLink is a Markdown link's target: a path, a #fragment, or both.
var mdLink = regexp.MustCompile(`\]\(([^()\s]*)\)`)

// TestDocLinks checks the relative links of README.md and docs/*.md: the
// file a link names exists, and its #fragment is the anchor GitHub gives
// one of that file's headings.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "README.md")
	links := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(flatten(string(b), false), -1) {
			target := m[1]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			file := p
			if path != "" {
				file = filepath.Join(filepath.Dir(p), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %v", p, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: a fragment of a file that is not Markdown", p, target)
				continue
			}
			hs, err := readHeadings(file)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(hs)[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", p, target, file, frag)
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative link found: the scan is broken")
	}
}

// anchors returns the anchors GitHub gives the headings hs: the text in
// lower case, with everything but letters, digits, spaces, "-" and "_"
// dropped and each space made a "-"; a repeated anchor gets "-1", "-2", ...
func anchors(hs []heading) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, h := range hs {
		var b strings.Builder
		for _, r := range strings.ToLower(linkText.ReplaceAllString(h.text, "$1")) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// linkText is a Markdown link inside a heading, whose text is the anchor's.
var linkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
