package ledger_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/ledger"
)

// The job-name limit is not a name of the root package: each adapter's
// RunOnce doc states it, and must state the one the ledger enforces.
func TestJobLimitDocumented(t *testing.T) {
	want := fmt.Sprintf("at most %d characters", ledger.MaxJobLen)
	for _, file := range []string{"../../gormlock/runonce.go", "../../entlock/runonce.go", "../../sqllock/sqllock.go", "../../pgxlock/pgxlock.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " "), want) {
			t.Errorf("%s: RunOnce's doc does not say %q", file, want)
		}
	}
}
