package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func testSolve(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := now()
	r1 := store.SolveRun{ID: "solve_1", State: apitypes.SolveRunning,
		Request:   apitypes.SolveRequest{Repo: "https://example.com/r.git", Task: "fix it", Test: "pytest -q", Attempts: 2, Model: "scripted", Budget: apitypes.SolveBudget{Steps: 9}},
		Attempts:  []apitypes.SolveAttempt{{N: 1, Workspace: "ws_1", Failures: map[string]int{"assertion": 1}}},
		CreatedAt: n, UpdatedAt: n}
	r2 := r1
	r2.ID, r2.State, r2.CreatedAt = "solve_2", apitypes.SolveDone, n.Add(time.Second)
	for _, r := range []store.SolveRun{r1, r2} {
		if err := s.CreateSolveRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	wantClass(t, s.CreateSolveRun(ctx, r1), errdefs.ErrConflict)
	got, err := s.GetSolveRun(ctx, "solve_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r1, got); diff != "" {
		t.Errorf("GetSolveRun (-want +got):\n%s", diff)
	}
	_, err = s.GetSolveRun(ctx, "solve_nope")
	wantClass(t, err, errdefs.ErrNotFound)
	all, err := s.ListSolveRuns(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"solve_2", "solve_1"}, ids(all, func(r store.SolveRun) string { return r.ID })); diff != "" {
		t.Errorf("ListSolveRuns (-want +got):\n%s", diff)
	}
	running, err := s.ListSolveRuns(ctx, apitypes.SolveRunning)
	if err != nil || len(running) != 1 || running[0].ID != "solve_1" {
		t.Errorf("ListSolveRuns(running) = %v, %v", running, err)
	}

	// An update from the state it has wins; one from a stale state is a
	// conflict that names the state now.
	upd := r1
	upd.State, upd.Best, upd.UpdatedAt = apitypes.SolveCanceled, "cand_x", n.Add(2*time.Second)
	if err := s.UpdateSolveRun(ctx, upd, apitypes.SolveRunning); err != nil {
		t.Fatal(err)
	}
	late := r1
	late.State = apitypes.SolveDone
	wantClass(t, s.UpdateSolveRun(ctx, late, apitypes.SolveRunning), errdefs.ErrConflict)
	if got, _ := s.GetSolveRun(ctx, "solve_1"); got.State != apitypes.SolveCanceled || got.Best != "cand_x" {
		t.Errorf("after the stale update: %+v", got)
	}
	missing := r1
	missing.ID = "solve_nope"
	wantClass(t, s.UpdateSolveRun(ctx, missing, apitypes.SolveRunning), errdefs.ErrNotFound)

	// Steps: in order per attempt, whatever order they were written in;
	// a second writer of the same step conflicts.
	step := func(attempt, seq int, kind string) store.SolveStep {
		return store.SolveStep{RunID: "solve_1", Attempt: attempt, Seq: seq, Role: "coder", Kind: kind,
			Doc: json.RawMessage(`{"message":{"edits":[]}}`), CreatedAt: n.Add(time.Duration(seq) * time.Millisecond)}
	}
	for _, st := range []store.SolveStep{step(2, 0, "plan"), step(1, 0, "plan"), step(1, 1, "patch"), step(2, 1, "patch"), step(1, 2, "stop")} {
		if err := s.AppendSolveStep(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	wantClass(t, s.AppendSolveStep(ctx, step(1, 1, "patch")), errdefs.ErrConflict)
	steps, err := s.ListSolveSteps(ctx, "solve_1", -1)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SolveStep{step(1, 0, "plan"), step(1, 1, "patch"), step(1, 2, "stop"), step(2, 0, "plan"), step(2, 1, "patch")}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("ListSolveSteps (-want +got):\n%s", diff)
	}
	one, err := s.ListSolveSteps(ctx, "solve_1", 2)
	if err != nil || len(one) != 2 || one[1].Kind != "patch" {
		t.Errorf("ListSolveSteps(attempt 2) = %v, %v", one, err)
	}
	if none, err := s.ListSolveSteps(ctx, "solve_2", -1); err != nil || len(none) != 0 {
		t.Errorf("steps of a run without any: %v, %v", none, err)
	}
}
