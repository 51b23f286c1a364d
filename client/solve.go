package client

import (
	"context"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// The agent loop's types.
type (
	SolveRequest = apitypes.SolveRequest
	SolveBudget  = apitypes.SolveBudget
	SolveRun     = apitypes.SolveRun
	SolveAttempt = apitypes.SolveAttempt
	SolveStep    = apitypes.SolveStep
)

// Solve starts the agent loop on a repository and a task; the daemon runs
// it, so it goes on if the caller goes away.
func (c *Client) Solve(ctx context.Context, req SolveRequest) (SolveRun, error) {
	var out SolveRun
	return out, c.json(ctx, request{method: "POST", path: "/v1/solve", body: req}, &out)
}

// SolveRuns lists the runs, newest first.
func (c *Client) SolveRuns(ctx context.Context) ([]SolveRun, error) {
	var out apitypes.SolveRunList
	return out.Runs, c.json(ctx, request{method: "GET", path: "/v1/solve"}, &out)
}

// GetSolve returns a run.
func (c *Client) GetSolve(ctx context.Context, id string) (SolveRun, error) {
	var out SolveRun
	return out, c.json(ctx, request{method: "GET", path: "/v1/solve/" + esc(id)}, &out)
}

// SolveSteps returns a run's recorded steps.
func (c *Client) SolveSteps(ctx context.Context, id string) ([]SolveStep, error) {
	var out apitypes.SolveStepList
	return out.Steps, c.json(ctx, request{method: "GET", path: "/v1/solve/" + esc(id) + "/steps"}, &out)
}

// CancelSolve cancels a running run.
func (c *Client) CancelSolve(ctx context.Context, id string) (SolveRun, error) {
	var out SolveRun
	return out, c.json(ctx, request{method: "POST", path: "/v1/solve/" + esc(id) + "/cancel"}, &out)
}
