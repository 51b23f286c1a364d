package store

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// UsageStore records and sums what execs and sandboxes used. It is part
// of Store.
type UsageStore interface {
	// FinishExecEvent is FinishExec and AppendEvent(ev) in one
	// transaction: an exec's end and its event cost one commit.
	FinishExecEvent(ctx context.Context, e Exec, ev Event) (Event, error)
	// RecordEgress adds one egress connection's bytes to its sandbox's
	// totals and to the time-stamped ledger that UsageByTask reads, and
	// appends ev (the decision's event), in one transaction.
	RecordEgress(ctx context.Context, e EgressUsage, ev Event) (Event, error)
	// RecordEgressBatch records many egress decisions in one transaction,
	// in order: for each, its usage as RecordEgress does when Usage is set,
	// and its event. Either all of them are recorded or none is.
	RecordEgressBatch(ctx context.Context, recs []EgressRecord) error
	// SetSandboxCgroupUsage records what the environment's cgroup counted
	// for sandbox id (read when it stops).
	SetSandboxCgroupUsage(ctx context.Context, id string, cpuNanos, peakMemBytes int64) error
	// SandboxUsage sums sandbox id's execs and returns its recorded
	// totals.
	SandboxUsage(ctx context.Context, id string) (SandboxUsage, error)
	// UsageByTask sums usage per task label, ordered by task.
	UsageByTask(ctx context.Context, f UsageFilter) ([]TaskUsage, error)
}

// EgressRecord is one egress decision to record: the bytes it moved,
// when it moved any, and its event.
type EgressRecord struct {
	// Usage is nil for a decision that moved nothing.
	Usage *EgressUsage
	Event Event
}

// EgressUsage is one egress connection of a sandbox.
type EgressUsage struct {
	Time        time.Time
	SandboxID   string
	WorkspaceID string
	// Task is the workspace's task label at the time.
	Task               string
	BytesUp, BytesDown int64
}

// SandboxUsage is what one sandbox used (see apitypes.SandboxUsage, whose
// type it is).
type SandboxUsage = apitypes.SandboxUsage

// UsageFilter selects what UsageByTask sums. Zero fields match everything.
type UsageFilter struct {
	// Task keeps one task label.
	Task string
	// Since keeps the execs that started, and the egress connections that
	// ended, at or after it.
	Since time.Time
	// ByWorkspace sums per task and workspace instead of per task.
	ByWorkspace bool
}

// TaskUsage is what the workspaces of one task label used: their execs
// and their egress. Workspaces without a label sum under Task "".
type TaskUsage struct {
	Task string `json:"task"`
	// WorkspaceID is the workspace summed, with UsageFilter.ByWorkspace.
	WorkspaceID string `json:"workspace_id,omitempty"`
	// Workspaces counts the distinct workspaces with execs or egress.
	Workspaces int64 `json:"workspaces"`
	// Execs, CPUNanos, WallNanos and OutputBytes sum the execs;
	// PeakMemBytes is the largest peak of one exec.
	Execs        int64 `json:"execs"`
	CPUNanos     int64 `json:"cpu_ns"`
	PeakMemBytes int64 `json:"peak_mem_bytes"`
	WallNanos    int64 `json:"wall_ns"`
	OutputBytes  int64 `json:"output_bytes"`
	// EgressBytesUp and EgressBytesDown sum the egress, each way.
	EgressBytesUp   int64 `json:"egress_bytes_up"`
	EgressBytesDown int64 `json:"egress_bytes_down"`
	// InputTokens, OutputTokens and CostUSD sum what the agent loop's
	// model calls spent for the workspaces: the manager adds them from
	// the solve runs, the store leaves them zero. SolveRun is the run
	// of a workspace's attempt (ByWorkspace only).
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
	SolveRun     string  `json:"solve_run,omitempty"`
}
