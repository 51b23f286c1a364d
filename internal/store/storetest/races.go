package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// testEventFollow checks that a reader following the log by AfterID, as
// `agentbox events --follow` does, sees every event exactly once while
// many writers append: an event whose ID is lower than one already seen
// must never become visible later. (A database that hands out IDs before
// commit, in parallel, breaks this unless the store orders the commits.)
func testEventFollow(t *testing.T, s store.Store) {
	ctx := t.Context()
	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				if i%2 == 0 {
					_, err = s.AppendEvent(ctx, store.Event{Actor: "test", Type: "follow", Detail: fmt.Sprintf("%d/%d", w, i)})
				} else {
					err = s.RecordEgressBatch(ctx, []store.EgressRecord{{Event: store.Event{Actor: "test", Type: "follow", Detail: fmt.Sprintf("%d/%d", w, i)}}})
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[string]bool{}
	var after int64
	follow := func() {
		evs, err := s.ListEvents(ctx, store.EventFilter{AfterID: after, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if seen[e.Detail] {
				t.Fatalf("event %s seen twice", e.Detail)
			}
			seen[e.Detail] = true
			after = e.ID
		}
	}
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		follow()
	}
	follow()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != writers*each {
		t.Errorf("the follower saw %d of %d events: some committed below an ID it had already passed", len(seen), writers*each)
	}
}

// testCandidateRace checks that of many decisions on one candidate made at
// once from the same disposition, exactly one wins.
func testCandidateRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := store.Candidate{ID: "cand_race", WorkspaceID: "ws_a", RepoID: "repo_1", Commit: "c1", BaseCommit: "b",
		Disposition: apitypes.DispositionReady, Findings: []string{}, CreatedAt: now(), UpdatedAt: now()}
	if err := s.CreateCandidate(ctx, c); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	results := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := c
			d.Disposition = fmt.Sprintf("decided_%d", i)
			results <- s.UpdateCandidate(ctx, d, apitypes.DispositionReady)
		}()
	}
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, errdefs.ErrConflict):
			t.Errorf("a losing decision: %v, want a conflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d decisions won, want exactly 1", won)
	}
}

// testDeleteRepoRace checks that a repo deleted while workspaces are made
// from it never leaves a workspace whose repo is gone.
func testDeleteRepoRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 10 {
		rid := fmt.Sprintf("repo_r%d", round)
		if err := s.CreateRepo(ctx, repo(rid)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.CreateWorkspace(ctx, ws(fmt.Sprintf("ws_r%d_%d", round, i), rid, ""))
				if err != nil && !errors.Is(err, errdefs.ErrConflict) {
					t.Errorf("creating a workspace of a repo being deleted: %v", err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.DeleteRepo(ctx, rid)
			if err != nil && !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("deleting a repo being used: %v", err)
			}
		}()
		wg.Wait()
		list, err := s.ListWorkspaces(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetRepo(ctx, rid); errors.Is(err, errdefs.ErrNotFound) && len(list) > 0 {
			t.Fatalf("repo %s deleted but %d workspace(s) still name it", rid, len(list))
		}
	}
}
