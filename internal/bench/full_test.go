// A measurement, not a test: it asserts nothing and takes up to an hour,
// so it is built only with -tags measure (scripts/test.sh vets it so).

//go:build measure

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
)

// TestWorkspaceFull runs the benchmark at full size and prints the table:
//
//	go test -tags measure ./internal/bench -run TestWorkspaceFull -v -timeout 1h
//
// AGENTBOX_BENCH_FILES, AGENTBOX_BENCH_RUNS and AGENTBOX_BENCH_DIR override
// the defaults.
func TestWorkspaceFull(t *testing.T) {
	needOverlay(t)
	opts := WorkspaceOptions{Files: envInt("AGENTBOX_BENCH_FILES", 0), Runs: envInt("AGENTBOX_BENCH_RUNS", 0), DataDir: os.Getenv("AGENTBOX_BENCH_DIR")}
	res, err := Workspace(context.Background(), opts, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("\n%s\n%s", out.String(), b)
}
