package apitypes

import (
	"encoding/json"
	"time"
)

// SolveRequest asks the daemon to take a repository and a task to a
// reviewed candidate: plan, edit, run the tests, diagnose, retry, in a
// sandbox on a fork per attempt. The daemon runs the loop, so that it
// outlives the client that asked.
type SolveRequest struct {
	// Repo is a repo ID or URL; Ref a branch, tag or commit (empty: the
	// default branch).
	Repo string `json:"repo"`
	Ref  string `json:"ref,omitempty"`
	// Task is the problem statement given to the model.
	Task string `json:"task"`
	// Test is the test command (sh -c): the loop's executor runs it after
	// each edit, and the review gate runs it again in a fresh sandbox.
	Test string `json:"test"`
	// Attempts is how many forks run the loop side by side (default 1,
	// at most MaxForks).
	Attempts int `json:"attempts,omitempty"`
	// Model is PROVIDER:MODEL for every role ("openai:gpt-4o-mini",
	// "anthropic:claude-sonnet-4-5", "scripted"); Models overrides it
	// per role (planner, coder, debugger).
	Model  string            `json:"model,omitempty"`
	Models map[string]string `json:"models,omitempty"`
	// Script is the scripted model's file (YAML or JSON), for Model
	// "scripted": the tool calls each role makes at each turn.
	Script string `json:"script,omitempty"`
	// Budget bounds the loop of each attempt; zero fields take defaults.
	Budget SolveBudget `json:"budget,omitempty"`
	// Timeout bounds each test run, a Go duration (default 10m).
	Timeout string `json:"timeout,omitempty"`
}

// SolveBudget bounds one attempt's loop. Whichever is reached first ends
// it, and the run says which.
type SolveBudget struct {
	// Tokens is the most input and output tokens the models may use.
	Tokens int `json:"tokens,omitempty"`
	// Steps is the most role steps (plan, patch, execution, diagnosis).
	Steps int `json:"steps,omitempty"`
	// Wall is the wall-clock budget, a Go duration.
	Wall string `json:"wall,omitempty"`
	// CostUSD is the most the model calls may cost.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Run states.
const (
	SolveRunning  = "running"
	SolveDone     = "done"
	SolveFailed   = "failed"
	SolveCanceled = "canceled"
)

// SolveRun is a run of the loop: its request, its attempts and, once
// done, its ranked candidates.
type SolveRun struct {
	ID      string       `json:"id"`
	State   string       `json:"state" enum:"running,done,failed,canceled"`
	Request SolveRequest `json:"request"`
	// Workspace is the workspace the attempts are forked from.
	Workspace string         `json:"workspace,omitempty"`
	Attempts  []SolveAttempt `json:"attempts"`
	// Best is the best-ranked attempt's candidate, if any.
	Best string `json:"best,omitempty"`
	// Error says why a failed run failed.
	Error string `json:"error,omitempty"`
	// Node is the node (daemon) that runs the loop: it alone resumes the
	// run after a restart, and a cancel goes to it.
	Node      string    `json:"node,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SolveAttempt is one fork's loop and its outcome.
type SolveAttempt struct {
	N         int    `json:"n"`
	Workspace string `json:"workspace"`
	// Stop says what ended the loop: passed, or the limit that did.
	Stop string `json:"stop,omitempty"`
	// Iterations is how many patches were tried.
	Iterations int        `json:"iterations"`
	Usage      SolveUsage `json:"usage"`
	// Failures counts the executions' failure categories.
	Failures map[string]int `json:"failures,omitempty"`
	// Candidate is the review gate's verdict on the attempt's files.
	Candidate   string `json:"candidate,omitempty"`
	Disposition string `json:"disposition,omitempty"`
	// Rank is 1 for the best attempt by evidence.
	Rank int `json:"rank,omitempty"`
}

// SolveUsage is what an attempt spent.
type SolveUsage struct {
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	Steps        int     `json:"steps"`
	WallMS       int64   `json:"wall_ms"`
}

// SolveStep is one durable step of a run: a role's message (plan, patch,
// execution, diagnosis) or a phase of the run (workspace, forks, review,
// stop).
type SolveStep struct {
	RunID   string `json:"run_id"`
	Attempt int    `json:"attempt"`
	Seq     int    `json:"seq"`
	Role    string `json:"role"`
	Kind    string `json:"kind"`
	// Doc is the step's typed message as JSON.
	Doc       json.RawMessage `json:"doc"`
	CreatedAt time.Time       `json:"created_at"`
}

// SolveStepList is a run's steps in order.
type SolveStepList struct {
	Steps []SolveStep `json:"steps"`
}

// SolveRunList lists runs, newest first.
type SolveRunList struct {
	Runs []SolveRun `json:"runs"`
}
