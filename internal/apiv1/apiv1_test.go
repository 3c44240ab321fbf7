package apiv1_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/apiv1"
	"github.com/ormlock/ormlock/internal/status"
)

// Marshal writes ASCII only, and the value decodes back exact: markup,
// control and format characters, DEL, characters beyond U+FFFF.
func TestMarshalASCII(t *testing.T) {
	name := "<script>\u202E\x1b[31m\x7f\u2028é😀&\"\\"
	b, err := apiv1.Marshal(apiv1.RunList{Job: name, Runs: apiv1.RunsOf([]status.Run{{Job: name, Slot: time.Date(2026, 12, 1, 2, 0, 0, 0, time.FixedZone("X", 3600))}})}, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		if c >= 0x7f || c == '<' || c == '>' || c == '&' {
			t.Fatalf("byte %d is %q: %s", i, c, b)
		}
	}
	var back apiv1.RunList
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if back.Job != name || back.Runs[0].Job != name || back.Runs[0].FinishedAt != nil || back.Runs[0].DurationMS != nil {
		t.Errorf("decoded %+v", back)
	}
	var raw map[string]any
	_ = json.Unmarshal(b, &raw)
	if slot := raw["runs"].([]any)[0].(map[string]any)["slot"]; slot != "2026-12-01T01:00:00Z" {
		t.Errorf("slot %v, want RFC 3339 in UTC", slot)
	}
}
