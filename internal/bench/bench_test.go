package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil/skip"
	"github.com/agentbox/agentbox/internal/workspace"
)

// needOverlay skips unless overlay workspaces owned by uid 1000 can be made
// here (root, overlayfs usable on the temp file system).
func needOverlay(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the workspace benchmark mounts overlays and chowns files: run as root")
	}
	if err := workspace.ProbeOverlay(t.TempDir()); err != nil {
		skip.OrFail(t, fmt.Sprintf("overlay mounts unavailable: %v", err))
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func checkResult(t *testing.T, res WorkspaceResult, files, runs int) {
	t.Helper()
	if res.Files != files || res.RepoBytes <= 0 {
		t.Errorf("files %d, repo bytes %d; want %d files and some bytes", res.Files, res.RepoBytes, files)
	}
	want := append([]string{CasePristine}, caseOrder...)
	if len(res.Cases) != len(want) {
		t.Fatalf("cases %+v; want %v", res.Cases, want)
	}
	for i, c := range res.Cases {
		wantRuns := runs
		if c.Name == CasePristine {
			wantRuns = 1
		}
		if c.Name != want[i] || c.Runs != wantRuns || c.Median <= 0 || c.P90 < c.Median {
			t.Errorf("case %d = %+v; want %s with %d runs, median > 0, p90 >= median", i, c, want[i], wantRuns)
		}
	}
	for _, key := range []string{"clone_shared/overlay_create", "worktree_add/overlay_create", "clone_shared/copy_create"} {
		if v := res.Ratios[key]; !(v > 0) {
			t.Errorf("ratio %s = %v; want > 0 (ratios %v)", key, v, res.Ratios)
		}
	}
	var out bytes.Buffer
	res.Print(&out)
	for _, s := range append(want, "clone_shared/overlay_create", "p90") {
		if !strings.Contains(out.String(), s) {
			t.Errorf("printed table lacks %q:\n%s", s, out.String())
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
}

func checkNoMounts(t *testing.T, dir string) {
	t.Helper()
	left, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("mounts left under %s: %v", dir, left)
	}
}

// TestWorkspace runs the whole benchmark small, in a given data dir: every
// case ran, nothing is left mounted, everything made is removed. It never
// looks at how long anything took.
func TestWorkspace(t *testing.T) {
	needOverlay(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "keep"), []byte("not the benchmark's"), 0o644)
	res, err := Workspace(context.Background(), WorkspaceOptions{Files: 500, Runs: 3, Changed: 10, DataDir: dir}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res, 500, 3)
	checkNoMounts(t, dir)
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "keep" {
		t.Errorf("data dir after the run holds %v; want only the caller's file", entries)
	}
	// A second run in the same dir works (nothing stale was left).
	if _, err := Workspace(context.Background(), WorkspaceOptions{Files: 50, Runs: 1, Changed: 5, DataDir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	checkNoMounts(t, dir)
}

// TestWorkspaceTempDir checks that the default data dir is a temporary
// directory that is gone afterwards.
func TestWorkspaceTempDir(t *testing.T) {
	needOverlay(t)
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	res, err := Workspace(context.Background(), WorkspaceOptions{Files: 200, Runs: 2, Changed: 3}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res, 200, 2)
	checkNoMounts(t, tmp)
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("temporary data dir not removed: %v", entries)
	}
}

// TestWorkspaceCancel checks that a cancelled run still cleans up.
func TestWorkspaceCancel(t *testing.T) {
	needOverlay(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var buf bytes.Buffer
	log := cancelAfter{w: &buf, after: "run 1/", cancel: cancel}
	_, err = Workspace(ctx, WorkspaceOptions{Files: 200, Runs: 5, Changed: 3, DataDir: dir}, &log)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run returned %v; want context.Canceled; log:\n%s", err, buf.String())
	}
	checkNoMounts(t, dir)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("data dir after a cancelled run holds %v", entries)
	}
}

// cancelAfter cancels once a log line containing after was written.
type cancelAfter struct {
	w      *bytes.Buffer
	after  string
	cancel func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.after) {
		c.cancel()
	}
	return c.w.Write(p)
}

func TestSummarize(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		in          []time.Duration
		median, p90 time.Duration
	}{
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(3, 1, 2), 2 * time.Millisecond, 3 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond},
		{ms(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 8 * time.Millisecond, 14 * time.Millisecond},
	} {
		c := summarize("x", tc.in)
		if c.Median != tc.median || c.P90 != tc.p90 || c.Runs != len(tc.in) {
			t.Errorf("summarize(%v) = %+v; want median %v p90 %v", tc.in, c, tc.median, tc.p90)
		}
	}
}
