package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func testCandidates(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := now()
	c1 := store.Candidate{ID: "cand_1", WorkspaceID: "ws_a", RepoID: "repo_1", Commit: "c1", BaseCommit: "b",
		Branch: "agentbox/a", Disposition: apitypes.DispositionReady, Findings: []string{},
		Evidence: apitypes.Evidence{Tests: &apitypes.CommandEvidence{Command: "make test", Passed: true, Output: "ok\n"},
			Stats: apitypes.DiffStats{Files: 1, Insertions: 2}},
		CreatedAt: n, UpdatedAt: n}
	c2 := c1
	c2.ID, c2.Disposition, c2.Findings, c2.CreatedAt = "cand_2", apitypes.DispositionBlocked, []string{"tests failed"}, n.Add(time.Second)
	c3 := c1
	c3.ID, c3.WorkspaceID = "cand_3", "ws_b"
	for _, c := range []store.Candidate{c1, c2, c3} {
		if err := s.CreateCandidate(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	wantClass(t, s.CreateCandidate(ctx, c1), errdefs.ErrConflict)
	got, err := s.GetCandidate(ctx, "cand_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c1, got); diff != "" {
		t.Errorf("GetCandidate (-want +got):\n%s", diff)
	}
	_, err = s.GetCandidate(ctx, "cand_nope")
	wantClass(t, err, errdefs.ErrNotFound)
	list, err := s.ListCandidates(ctx, "ws_a")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "cand_2" || list[1].ID != "cand_1" {
		t.Errorf("ListCandidates(ws_a) = %v, want cand_2 then cand_1", list)
	}
	if all, err := s.ListCandidates(ctx, ""); err != nil || len(all) != 3 {
		t.Errorf("ListCandidates() = %d, %v", len(all), err)
	}

	// A decision moves a ready candidate once; a second, racing one fails.
	c1.Disposition = apitypes.DispositionApproved
	c1.Decision = &apitypes.Decision{Disposition: apitypes.DispositionApproved, Actor: "ann", Reason: "good", At: n}
	if err := s.UpdateCandidate(ctx, c1, apitypes.DispositionReady); err != nil {
		t.Fatal(err)
	}
	c1.Disposition = apitypes.DispositionRejected
	wantClass(t, s.UpdateCandidate(ctx, c1, apitypes.DispositionReady), errdefs.ErrConflict)
	if got, _ := s.GetCandidate(ctx, "cand_1"); got.Disposition != apitypes.DispositionApproved || got.Decision == nil || got.Decision.Actor != "ann" {
		t.Errorf("after the racing decision: %+v", got)
	}
	missing := c1
	missing.ID = "cand_nope"
	wantClass(t, s.UpdateCandidate(ctx, missing, apitypes.DispositionReady), errdefs.ErrNotFound)
}

func testForges(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := now()
	f := store.ForgeBinding{Host: "git.example.invalid", Kind: "gitea", Secret: "gitea-token", Protected: []string{"release/*"}, CreatedAt: n, UpdatedAt: n}
	if err := s.PutForge(ctx, f); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetForge(ctx, f.Host)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, got); diff != "" {
		t.Errorf("GetForge (-want +got):\n%s", diff)
	}
	// A replacement keeps the creation time.
	g := f
	g.Secret, g.CreatedAt, g.UpdatedAt = "other", n.Add(time.Hour), n.Add(time.Hour)
	if err := s.PutForge(ctx, g); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetForge(ctx, f.Host)
	if got.Secret != "other" || !got.CreatedAt.Equal(n) || !got.UpdatedAt.Equal(n.Add(time.Hour)) {
		t.Errorf("after a replacement: %+v", got)
	}
	if l, err := s.ListForges(ctx); err != nil || len(l) != 1 || l[0].Host != f.Host {
		t.Errorf("ListForges = %v, %v", l, err)
	}
	if err := s.DeleteForge(ctx, f.Host); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetForge(ctx, f.Host)
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, s.DeleteForge(ctx, f.Host), errdefs.ErrNotFound)
}
