package manager

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// TestCheckDiff checks a workspace's result through the manager: files
// written through the file API, real git for the status and the diff, the
// policy given or taken from the workspace's latest sandbox record (no
// sandbox is started).
func TestCheckDiff(t *testing.T) {
	for _, driver := range []string{workspace.Overlay, workspace.Copy} {
		t.Run(driver, func(t *testing.T) { testCheckDiff(t, driver) })
	}
}

func testCheckDiff(t *testing.T, driver string) {
	h := newHarness(t, driver)
	w := h.create(CreateRequest{})
	// Assembled so that this file holds nothing a scanner takes for a
	// real token; AKIAIOSFODNN7EXAMPLE is AWS's documented example.
	ghp := "ghp_" + strings.Repeat("a1B2", 9)
	akia := "AKIA" + "IOSFODNN7EXAMPLE"
	h.writeFile(w.ID, "src/ok.go", "package src\n")
	h.writeFile(w.ID, "notes/outside.txt", "outside the writable paths\n")
	h.writeFile(w.ID, "src/token.go", "package src\n\n// a fixture\nvar token = \""+ghp+"\"\n")
	h.writeFile(w.ID, "config/aws.ini", "[default]\naws_access_key_id = "+akia+"\n")
	h.removeFile(w.ID, "docs/guide.txt")

	secrets := []diffcheck.SecretFinding{
		{Path: "config/aws.ini", Line: 2, Column: 21, Kind: diffcheck.KindAWSAccessKeyID, Excerpt: "AKIA…(20 bytes)"},
		{Path: "src/token.go", Line: 4, Column: 14, Kind: diffcheck.KindGitHubToken, Excerpt: "ghp_…(40 bytes)"},
	}
	// addSandbox records a stopped sandbox of w with pol, created at.
	addSandbox := func(t *testing.T, pol *policy.Policy, at time.Time) {
		t.Helper()
		spec, err := json.Marshal(sandbox.Spec{Backend: "local", Image: "agentbox/busybox:latest", Policy: pol})
		if err != nil {
			t.Fatal(err)
		}
		sb := store.Sandbox{ID: ids.New("sb"), WorkspaceID: w.ID, Backend: "local", Image: "agentbox/busybox:latest",
			Spec: string(spec), State: string(sandbox.StateStopped), CreatedAt: at, UpdatedAt: at, LastActivityAt: at}
		if err := h.st.CreateSandbox(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
	}
	srcOnly := &policy.Policy{WritablePaths: []string{"src/**"}}
	now := time.Now().UTC()

	steps := []struct {
		name string
		// before runs first: the sandbox records accumulate.
		before func(t *testing.T)
		pol    *policy.Policy
		want   []diffcheck.PathFinding
	}{
		{name: "no policy and no sandbox: all writable", want: []diffcheck.PathFinding{}},
		{name: "policy given", pol: srcOnly, want: []diffcheck.PathFinding{
			{Path: "config/aws.ini", Status: "A"},
			{Path: "docs/guide.txt", Status: "D"},
			{Path: "notes/outside.txt", Status: "A"},
		}},
		{name: "latest sandbox's policy", before: func(t *testing.T) {
			addSandbox(t, &policy.Policy{WritablePaths: []string{"README.md"}}, now.Add(-2*time.Hour))
			addSandbox(t, &policy.Policy{WritablePaths: []string{"src/**", "config/**", "docs/**"}}, now.Add(-time.Hour))
		}, want: []diffcheck.PathFinding{
			{Path: "notes/outside.txt", Status: "A"},
		}},
		{name: "a given policy beats the sandbox's", pol: srcOnly, want: []diffcheck.PathFinding{
			{Path: "config/aws.ini", Status: "A"},
			{Path: "docs/guide.txt", Status: "D"},
			{Path: "notes/outside.txt", Status: "A"},
		}},
		{name: "latest sandbox without a policy: all writable", before: func(t *testing.T) {
			addSandbox(t, nil, now)
		}, want: []diffcheck.PathFinding{}},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			got, err := h.m.CheckDiff(t.Context(), w.ID, tt.pol)
			if err != nil {
				t.Fatal(err)
			}
			want := diffcheck.Report{OK: false, OutsideWritable: tt.want, Secrets: secrets}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("CheckDiff (-want +got):\n%s", diff)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{ghp, akia} {
				if strings.Contains(string(b), s) {
					t.Errorf("the report holds the secret %s…: %s", s[:4], b)
				}
			}
		})
	}

	t.Run("clean workspace", func(t *testing.T) {
		h := h.sub(t)
		w := h.create(CreateRequest{})
		h.writeFile(w.ID, "src/fine.go", "package src\n")
		got, err := h.m.CheckDiff(t.Context(), w.ID, srcOnly)
		if err != nil {
			t.Fatal(err)
		}
		want := diffcheck.Report{OK: true, OutsideWritable: []diffcheck.PathFinding{}, Secrets: []diffcheck.SecretFinding{}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("CheckDiff (-want +got):\n%s", diff)
		}
	})
	t.Run("rename out of the writable paths", func(t *testing.T) {
		h := h.sub(t)
		w := h.create(CreateRequest{})
		fs, release, err := h.m.Files(t.Context(), w.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		err = fs.Rename(t.Context(), "keep/old.txt", "src/old.txt")
		release()
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.m.CheckDiff(t.Context(), w.ID, srcOnly)
		if err != nil {
			t.Fatal(err)
		}
		// The status lists a delete and an add; the diff names the rename.
		want := []diffcheck.PathFinding{{Path: "keep/old.txt", Status: "D", RenamedTo: "src/old.txt"}}
		if diff := cmp.Diff(want, got.OutsideWritable); diff != "" || got.OK {
			t.Errorf("OutsideWritable (-want +got):\n%s\nOK = %v", diff, got.OK)
		}
	})
	t.Run("unknown workspace", func(t *testing.T) {
		for _, pol := range []*policy.Policy{nil, srcOnly} {
			if _, err := h.m.CheckDiff(t.Context(), "ws_nope", pol); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("CheckDiff(ws_nope, %v) = %v, want ErrNotFound", pol, err)
			}
		}
	})
}

// TestCommitRefusesFlagged: a commit whose tree fails the check is refused
// naming each finding, redacted, and changes nothing; with Force it is
// made and the event records that it was forced and what was found.
func TestCommitRefusesFlagged(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	ctx := t.Context()
	w := h.create(CreateRequest{})
	ghp := "ghp_" + strings.Repeat("a1B2", 9) // assembled: see testCheckDiff
	h.writeFile(w.ID, "src/token.go", "package src\n\nvar token = \""+ghp+"\"\n")
	before := h.status(w.ID)

	_, err := h.m.Commit(ctx, w.ID, "leak", nil)
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Commit of a token = %v, want ErrConflict", err)
	}
	for _, want := range []string{w.ID, "src/token.go:3:14: github-token ghp_…(40 bytes)", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), ghp) {
		t.Errorf("the refusal holds the token: %v", err)
	}
	if after := h.status(w.ID); after.Head != before.Head || len(after.Changes) != len(before.Changes) {
		t.Errorf("a refused commit changed the workspace: %+v, then %+v", before, after)
	}

	// A path outside the writable paths of the latest sandbox's policy.
	h.writeFile(w.ID, "src/token.go", "package src\n")
	h.writeFile(w.ID, ".github/workflows/x.yml", "on: push\n")
	spec, err := json.Marshal(sandbox.Spec{Backend: "local", Image: "agentbox/busybox:latest", Policy: &policy.Policy{WritablePaths: []string{"src/**"}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := h.st.CreateSandbox(ctx, store.Sandbox{ID: ids.New("sb"), WorkspaceID: w.ID, Backend: "local", Image: "agentbox/busybox:latest",
		Spec: string(spec), State: string(sandbox.StateStopped), CreatedAt: now, UpdatedAt: now, LastActivityAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Commit(ctx, w.ID, "workflow", nil); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), ".github/workflows/x.yml (A) outside the writable paths") {
		t.Errorf("Commit outside the writable paths = %v", err)
	}

	res, err := h.m.CommitWith(ctx, w.ID, apitypes.CommitRequest{Message: "forced", Force: true})
	if err != nil {
		t.Fatalf("forced commit: %v", err)
	}
	if !res.Forced || res.Findings == nil || len(res.Findings.OutsideWritable) != 1 {
		t.Errorf("forced commit result = %+v", res)
	}
	evs, err := h.m.Events(ctx, store.EventFilter{WorkspaceID: w.ID, Type: "workspace.committed"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("commit events: %v, %v", evs, err)
	}
	if !strings.Contains(evs[0].Detail, `"forced":true`) || !strings.Contains(evs[0].Detail, ".github/workflows/x.yml") {
		t.Errorf("the event of a forced commit: %s", evs[0].Detail)
	}
}
