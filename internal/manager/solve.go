package manager

import (
	"context"

	"github.com/agentbox/agentbox/internal/store"
)

// The agent loop (package solve) is an adapter over the manager like the
// API: it keeps its runs through these, never the store itself.

// CreateSolveRun records a new run of the agent loop.
func (m *Manager) CreateSolveRun(ctx context.Context, r store.SolveRun) error {
	return m.st.CreateSolveRun(ctx, r)
}

// GetSolveRun returns a run.
func (m *Manager) GetSolveRun(ctx context.Context, id string) (store.SolveRun, error) {
	return m.st.GetSolveRun(ctx, id)
}

// ListSolveRuns returns the runs in state ("" for all), newest first.
func (m *Manager) ListSolveRuns(ctx context.Context, state string) ([]store.SolveRun, error) {
	return m.st.ListSolveRuns(ctx, state)
}

// UpdateSolveRun replaces a run whose state is still from.
func (m *Manager) UpdateSolveRun(ctx context.Context, r store.SolveRun, from string) error {
	return m.st.UpdateSolveRun(ctx, r, from)
}

// AppendSolveStep records a step of a run.
func (m *Manager) AppendSolveStep(ctx context.Context, s store.SolveStep) error {
	return m.st.AppendSolveStep(ctx, s)
}

// ListSolveSteps returns a run's steps (attempt -1: all of them).
func (m *Manager) ListSolveSteps(ctx context.Context, runID string, attempt int) ([]store.SolveStep, error) {
	return m.st.ListSolveSteps(ctx, runID, attempt)
}

// SecretValues are the values in the secret store, for redacting sandbox
// output before it goes to a model. They never leave the daemon.
func (m *Manager) SecretValues(ctx context.Context) ([]string, error) {
	return m.knownSecrets(ctx, "")
}

// DataDir is the daemon's data directory, a path to keep out of what a
// model is shown.
func (m *Manager) DataDir() string { return m.cfg.DataDir }

// Event records an event of an adapter (a solve run's start and stop).
func (m *Manager) Event(ctx context.Context, e store.Event, detail map[string]any) {
	m.event(ctx, e, detail)
}
