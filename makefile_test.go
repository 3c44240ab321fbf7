package ormlock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeTestRunsEveryModule runs make test's module loop with a stand-in
// for go that fails in the root module: every other module must still run,
// and the target must fail naming the modules that failed.
func TestMakeTestRunsEveryModule(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	record := filepath.Join(dir, "ran")
	fake := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho \"$PWD\" >> " + record + "\n" +
		"[ \"$PWD\" = \"" + mustAbs(t, ".") + "\" ] && exit 1\nexit 0\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "--no-print-directory", "test-modules", "GO="+fake).CombinedOutput()
	if err == nil {
		t.Fatalf("make test-modules passed with a failing module:\n%s", out)
	}
	if !strings.Contains(string(out), "FAILED in: .") {
		t.Errorf("make test-modules does not name the failed module:\n%s", out)
	}
	ran, _ := os.ReadFile(record)
	mods, _ := filepath.Glob("*/go.mod")
	for _, m := range mods {
		d := filepath.Dir(m)
		if d == "webui" || strings.HasPrefix(m, "webui/uitest") {
			continue
		}
		if !strings.Contains(string(ran), mustAbs(t, d)+"\n") {
			t.Errorf("module %s did not run after the root module failed:\nran:\n%s\noutput:\n%s", d, ran, out)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
