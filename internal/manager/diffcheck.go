package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// CheckDiff checks the result of workspace wsID before it leaves (see
// package diffcheck): its changed paths against the writable paths of pol
// or, when pol is nil, of the policy of the workspace's most recent
// sandbox (everything is writable when neither names any), and its added
// lines for secrets.
//
// The status and the diff are two git runs; a sandbox still writing can
// change the files between them. diffcheck takes the union of the paths
// both name, so nothing either saw goes unjudged.
func (m *Manager) CheckDiff(ctx context.Context, wsID string, pol *policy.Policy) (diffcheck.Report, error) {
	if pol == nil {
		p, err := m.lastSandboxPolicy(ctx, wsID)
		if err != nil {
			return diffcheck.Report{}, err
		}
		pol = p
	}
	st, err := m.Status(ctx, wsID)
	if err != nil {
		return diffcheck.Report{}, err
	}
	d, err := m.Diff(ctx, wsID, nil)
	if err != nil {
		return diffcheck.Report{}, err
	}
	known, err := m.knownSecrets(ctx, wsID)
	if err != nil {
		return diffcheck.Report{}, err
	}
	opt := diffcheck.Options{KnownSecrets: known}
	if pol != nil {
		opt.Writable = pol.PathWritable
	}
	return diffcheck.Check(st.Changes, d, opt), nil
}

// knownSecrets are the values in the daemon's secret store, which must not
// leave in a result. They are only ever compared, never logged or put in
// an error, and a failure to read them fails the check rather than
// passing it unscanned. A daemon without a store has none.
func (m *Manager) knownSecrets(ctx context.Context, wsID string) ([]string, error) {
	if m.cfg.Secrets == nil {
		return nil, nil
	}
	vals, err := m.cfg.Secrets.Values(ctx)
	if err != nil {
		return nil, fmt.Errorf("checking workspace %s: reading the secret store: %w", wsID, err)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out, nil
}

// lastSandboxPolicy is the policy of the workspace's most recently created
// sandbox, nil when it has none or the sandbox had no policy. The sandbox
// need not be running: its record is what it was allowed.
func (m *Manager) lastSandboxPolicy(ctx context.Context, wsID string) (*policy.Policy, error) {
	// The workspace is looked up first so that an unknown ID is reported
	// as such rather than as a workspace without sandboxes.
	if _, err := m.GetWorkspace(ctx, wsID); err != nil {
		return nil, err
	}
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: wsID})
	if err != nil {
		return nil, err
	}
	if len(sbs) == 0 {
		return nil, nil
	}
	last := slices.MaxFunc(sbs, func(a, b store.Sandbox) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	var spec sandbox.Spec
	if err := json.Unmarshal([]byte(last.Spec), &spec); err != nil {
		return nil, fmt.Errorf("reading the spec of sandbox %s: %w", last.ID, err)
	}
	return spec.Policy, nil
}
