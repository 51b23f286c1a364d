package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestCLIGC drives `agentbox gc` against a daemon whose data dir is over
// its budget: the dry run lists the unused repo, then the clean workspace
// (retention is set), never the dirty one, and changes nothing; the real
// run removes exactly those, with events and metrics.
func TestCLIGC(t *testing.T) {
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	// A one-byte budget, collected only on request during the test.
	if err := os.WriteFile(cfg, []byte("data_budget: \"1\"\nworkspace_retention: 1s\ngc_interval: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTBOX_CONFIG", cfg)
	used := testutil.NewRepo(t, map[string]string{"main.py": "print('hi')\n"})
	unused := testutil.NewRepo(t, map[string]string{"other.txt": "x\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)

	j := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	repoID := j("repo", "add", used.Dir)["id"].(string)
	unusedID := j("repo", "add", unused.Dir)["id"].(string)
	clean := j("ws", "create", "--repo", repoID)["id"].(string)
	dirty := j("ws", "create", "--repo", repoID)["id"].(string)
	if out, errOut, code := runCLI(t, data, "unsaved\n", "files", "write", dirty, "work.txt"); code != 0 {
		t.Fatalf("files write: %d %s%s", code, out, errOut)
	}
	// The unpacked image cache is the machine's, not the data dir's: what
	// other tests leave there comes and goes (the collector's image tier
	// is tested apart, in internal/manager and internal/backend/local).
	keys := func(doc map[string]any) []string {
		var out []string
		for _, it := range doc["items"].([]any) {
			m := it.(map[string]any)
			if m["kind"] != "image" {
				out = append(out, m["kind"].(string)+"/"+m["id"].(string))
			}
		}
		return out
	}
	want := []string{"repo/" + unusedID, "workspace/" + clean}

	// The clean workspace qualifies once it is unused for the retention.
	var dry map[string]any
	deadline := time.Now().Add(20 * time.Second)
	for {
		dry = j("gc", "--dry-run")
		if got := keys(dry); strings.Join(got, " ") == strings.Join(want, " ") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("gc --dry-run lists %v, want %v", got, want)
		}
		time.Sleep(200 * time.Millisecond) // polling until the retention has passed, bounded
	}
	if dry["dry_run"] != true || dry["under_budget"] != false || dry["usage_bytes"].(float64) <= 0 {
		t.Errorf("dry run report %v", dry)
	}
	for _, it := range dry["items"].([]any) {
		m := it.(map[string]any)
		if m["removed"] != false || m["reason"] == "" || m["tier"] == nil {
			t.Errorf("dry run item %v", m)
		}
	}
	if n := len(j("repo", "ls")["repos"].([]any)); n != 2 {
		t.Errorf("%d repos after the dry run, want 2", n)
	}
	if n := len(j("ws", "ls")["workspaces"].([]any)); n != 2 {
		t.Errorf("%d workspaces after the dry run, want 2", n)
	}
	human, _, code := runCLI(t, data, "", "gc", "--dry-run")
	if code != 0 || !strings.Contains(human, "would remove") || !strings.Contains(human, unusedID) || !strings.Contains(human, clean) || strings.Contains(human, dirty) {
		t.Errorf("gc --dry-run (human), exit %d:\n%s", code, human)
	}

	rep := j("gc")
	if got := keys(rep); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("gc removed %v, want %v", got, want)
	}
	for _, it := range rep["items"].([]any) {
		if m := it.(map[string]any); m["removed"] != true {
			t.Errorf("item %v not removed", m)
		}
	}
	wss := j("ws", "ls")["workspaces"].([]any)
	if len(wss) != 1 || wss[0].(map[string]any)["id"] != dirty {
		t.Errorf("workspaces after gc: %v", wss)
	}
	if got := j("files", "read", dirty, "work.txt")["content"]; got != "unsaved\n" {
		t.Errorf("the dirty workspace's file after gc: %q", got)
	}
	if repos := j("repo", "ls")["repos"].([]any); len(repos) != 1 || repos[0].(map[string]any)["id"] != repoID {
		t.Errorf("repos after gc: %v", repos)
	}
	var evs []any
	for _, e := range j("events", "--type", "gc.removed")["events"].([]any) {
		if d, _ := e.(map[string]any)["detail"].(string); !strings.Contains(d, `"kind":"image"`) {
			evs = append(evs, e)
		}
	}
	if len(evs) != 2 {
		t.Errorf("%d gc.removed events of the data dir, want 2: %v", len(evs), evs)
	}
	metrics := scrape(t, data)
	for _, want := range []string{`agentbox_gc_removals_total{kind="repo"} 1`, `agentbox_gc_removals_total{kind="workspace"} 1`, `agentbox_gc_removals_total{kind="pristine"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if out, _, code := runCLI(t, data, "", "--json", "gc", "--budget", "lots"); code == 0 || !strings.Contains(out, "invalid") {
		t.Errorf("gc --budget lots: exit %d %s", code, out)
	}
}

// scrape reads the daemon's /metrics over its socket.
func scrape(t *testing.T, data string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(data, "agentbox.sock"))
	}}}
	resp, err := hc.Get("http://agentbox/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
