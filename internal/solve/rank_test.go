package solve

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
)

func TestRank(t *testing.T) {
	as := []apitypes.SolveAttempt{
		{N: 1, Disposition: "blocked", Stop: "passed", Iterations: 1},
		{N: 2, Disposition: "ready", Stop: "passed", Iterations: 3},
		{N: 3, Disposition: "ready", Stop: "passed", Iterations: 2, Usage: apitypes.SolveUsage{InputTokens: 900}},
		{N: 4, Disposition: "ready", Stop: "passed", Iterations: 2, Usage: apitypes.SolveUsage{InputTokens: 100}},
		{N: 5, Disposition: "blocked", Stop: "step limit: 4 steps", Iterations: 1},
		{N: 6, Stop: "canceled"},
	}
	rank(as)
	got := map[int]int{}
	for _, a := range as {
		got[a.N] = a.Rank
	}
	want := map[int]int{4: 1, 3: 2, 2: 3, 1: 4, 5: 5, 6: 6}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ranks by attempt (-want +got):\n%s", diff)
	}
}

func TestCheckRequest(t *testing.T) {
	ok := apitypes.SolveRequest{Repo: "r", Task: "t", Test: "true", Script: "planner: [{calls: []}]", Model: "scripted"}
	for name, mut := range map[string]func(*apitypes.SolveRequest){
		"no test":        func(r *apitypes.SolveRequest) { r.Test = "" },
		"attempts":       func(r *apitypes.SolveRequest) { r.Attempts = 17 },
		"model":          func(r *apitypes.SolveRequest) { r.Model = "gemini:x" },
		"openai no name": func(r *apitypes.SolveRequest) { r.Model = "openai" },
		"role":           func(r *apitypes.SolveRequest) { r.Models = map[string]string{"executor": "scripted"} },
		"script":         func(r *apitypes.SolveRequest) { r.Script = "planner: {not: a list}" },
		"no script":      func(r *apitypes.SolveRequest) { r.Script = "" },
		"wall":           func(r *apitypes.SolveRequest) { r.Budget.Wall = "-1s" },
		"tokens":         func(r *apitypes.SolveRequest) { r.Budget.Tokens = -1 },
	} {
		r := ok
		mut(&r)
		if err := checkRequest(&r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := ok
	if err := checkRequest(&r); err != nil || r.Attempts != 1 {
		t.Errorf("a good request: %v %+v", err, r)
	}
}
