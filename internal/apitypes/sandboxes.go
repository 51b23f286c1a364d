package apitypes

import (
	"encoding/json"
	"time"
)

// --- sandboxes

// SandboxLimits are a sandbox's hard limits; zero fields take the daemon's
// defaults.
type SandboxLimits struct {
	// CPUs is the CPU quota in cores (0.5 = half a core).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryBytes is the memory limit, /tmp included, without swap.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids caps the number of processes and threads.
	Pids int64 `json:"pids,omitempty"`
	// TmpBytes sizes the /tmp tmpfs.
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
}

// SandboxRequest asks for a sandbox on a workspace.
type SandboxRequest struct {
	// Workspace is the ID of the workspace mounted at /workspace.
	Workspace string `json:"workspace"`
	// Backend is docker, gvisor, local or kubernetes; empty: the daemon's default.
	Backend string `json:"backend,omitempty"`
	// Image is an image in the engine (docker, gvisor) or an unpacked
	// root (local); empty: the default image.
	Image  string        `json:"image,omitempty"`
	Limits SandboxLimits `json:"limits,omitzero"`
	// Lifetime is a Go duration ("2h"): the sandbox stops at that age;
	// empty means none.
	Lifetime string `json:"lifetime,omitempty"`
	// Policy is the sandbox's policy document, read strictly (unknown
	// fields are errors); none means no network.
	Policy json.RawMessage `json:"policy,omitempty" schema:"Policy"`
}

// Sandbox is one execution environment attached to a workspace.
type Sandbox struct {
	// ID is the stable identifier ("sb_...").
	ID string `json:"id"`
	// WorkspaceID is the workspace mounted at /workspace.
	WorkspaceID string `json:"workspace_id"`
	// Backend is the backend's name; BackendRef its handle (container
	// ID...).
	Backend    string `json:"backend"`
	BackendRef string `json:"backend_ref"`
	// Image is the image or root file system it runs.
	Image string `json:"image"`
	// Spec is the full spec as JSON (backend, image, limits, lifetime,
	// policy), so that a replacement gets exactly the same.
	Spec string `json:"spec"`
	// State is creating, running, stopped or lost (its environment is
	// gone: the next exec on its workspace replaces it).
	State string `json:"state" enum:"creating,running,stopped,lost"`
	// Replaces is the sandbox this one replaced, if any.
	Replaces string `json:"replaces,omitempty"`
	// Node is the node (daemon) that runs the sandbox.
	Node string `json:"node,omitempty"`
	// CreatedAt, UpdatedAt and LastActivityAt are timestamps; activity is
	// any API call that used the sandbox.
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	LastActivityAt time.Time `json:"last_activity_at"`
}

// SandboxList is the reply of a sandbox listing.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// --- events

// Event is one entry of the append-only log: who did what to which object.
type Event struct {
	// ID increases with every append.
	ID int64 `json:"id"`
	// Time is when the event was recorded.
	Time time.Time `json:"time"`
	// Actor is who caused it ("api", "daemon", "reconciler", ...).
	Actor string `json:"actor"`
	// Type is a dotted name, e.g. "repo.cloned", "workspace.created".
	Type string `json:"type"`
	// RepoID, WorkspaceID and SandboxID name the objects involved, if any.
	RepoID      string `json:"repo_id,omitempty"`
	WorkspaceID string `json:"workspace_id,omitempty"`
	SandboxID   string `json:"sandbox_id,omitempty"`
	// Detail is a small JSON object with event-specific fields, as a
	// string.
	Detail string `json:"detail,omitempty"`
}

// EventList is the reply of an event listing, oldest first.
type EventList struct {
	Events []Event `json:"events"`
}

// --- usage

// TaskUsage is what the workspaces of one task label used: their execs'
// CPU time (the commands' whole process trees), the largest peak memory
// of one command, wall time, output, and the bytes their egress moved.
type TaskUsage struct {
	Task string `json:"task"`
	// WorkspaceID is the workspace of a row of Usage.Workspaces.
	WorkspaceID     string  `json:"workspace_id,omitempty"`
	Workspaces      int64   `json:"workspaces"`
	Execs           int64   `json:"execs"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	PeakMemBytes    int64   `json:"peak_mem_bytes"`
	WallSeconds     float64 `json:"wall_seconds"`
	OutputBytes     int64   `json:"output_bytes"`
	EgressBytes     int64   `json:"egress_bytes"`
	EgressBytesUp   int64   `json:"egress_bytes_up"`
	EgressBytesDown int64   `json:"egress_bytes_down"`
	// InputTokens, OutputTokens and CostUSD sum what the agent loop's
	// model calls spent (agentbox solve): an attempt's spending counts
	// for its fork's workspace and that workspace's task.
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// SolveRun is the solve run of a workspace's attempt (rows of
	// Usage.Workspaces only).
	SolveRun string `json:"solve_run,omitempty"`
}

// Usage is the reply of a usage query: usage per task label, or per task
// and workspace.
type Usage struct {
	// Since echoes the window's start; absent for all time.
	Since *time.Time `json:"since,omitempty"`
	// Tasks has a row per task label (by=task, the default).
	Tasks []TaskUsage `json:"tasks"`
	// Workspaces has a row per task label and workspace (by=workspace;
	// Tasks is then empty).
	Workspaces []TaskUsage `json:"workspaces,omitempty"`
}

// SandboxUsage is what one sandbox used. The exec figures sum the
// commands run in it; the cgroup figures are the environment's own
// accounting, which also covers the guest and, on gVisor, the sentry, and
// are zero until the sandbox stopped or when its backend cannot read them.
type SandboxUsage struct {
	SandboxID string `json:"sandbox_id"`
	// Execs counts the commands run (sessions included).
	Execs int64 `json:"execs"`
	// CPUNanos sums the commands' CPU time (user and system).
	CPUNanos int64 `json:"cpu_ns"`
	// PeakMemBytes is the largest peak of a single command.
	PeakMemBytes int64 `json:"peak_mem_bytes"`
	// WallNanos sums the commands' wall time.
	WallNanos int64 `json:"wall_ns"`
	// OutputBytes sums the commands' stdout and stderr.
	OutputBytes int64 `json:"output_bytes"`
	// CgroupCPUNanos and CgroupPeakMemBytes are the environment's cgroup
	// CPU usage and memory high-water mark (page cache included).
	CgroupCPUNanos     int64 `json:"cgroup_cpu_ns"`
	CgroupPeakMemBytes int64 `json:"cgroup_peak_mem_bytes"`
	// EgressBytesUp and EgressBytesDown sum the egress proxy's allowed
	// connections of the sandbox, each way.
	EgressBytesUp   int64 `json:"egress_bytes_up"`
	EgressBytesDown int64 `json:"egress_bytes_down"`
}

// --- disk collection

// GCRequest asks for one disk collection. An empty body is a real run
// under the daemon's configured budget.
type GCRequest struct {
	// DryRun lists what would go and removes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Budget, a size like "10G" or a number of bytes, replaces the
	// daemon's data_budget for this run.
	Budget ByteSize `json:"budget,omitempty"`
}

// GCItem is one object the collector removed, or would remove.
type GCItem struct {
	// Tier is 0 (unpacked images, outside the data dir), 1 (sandboxes),
	// 2 (pristine checkouts), 3 (repo caches) or 4 (clean workspaces);
	// Kind says which.
	Tier int    `json:"tier"`
	Kind string `json:"kind" enum:"image,sandbox,pristine,repo,workspace"`
	// ID is the object's ID (an image id, a sandbox, pristine, repo or
	// workspace).
	ID string `json:"id"`
	// Bytes is what removing it frees: its allocated blocks that nothing
	// outside it links to.
	Bytes int64 `json:"bytes"`
	// Reason says why it may go.
	Reason string `json:"reason"`
	// Removed is true once it is gone (never in a dry run).
	Removed bool `json:"removed"`
	// Error is why a removal that was tried failed.
	Error string `json:"error,omitempty"`
}

// GCReport is the outcome of one collection.
type GCReport struct {
	DryRun bool `json:"dry_run"`
	// BudgetBytes is the budget the run collected down to.
	BudgetBytes int64 `json:"budget_bytes"`
	// UsageBytes is the data dir's usage when the run began, measured
	// as Method says (walk or statfs).
	UsageBytes int64  `json:"usage_bytes"`
	Method     string `json:"method"`
	// FreedBytes is the sum of the items' bytes.
	FreedBytes int64 `json:"freed_bytes"`
	// AfterBytes is the usage at the end: measured again after a real
	// run, UsageBytes - FreedBytes for a dry run.
	AfterBytes int64 `json:"after_bytes"`
	// UnderBudget says whether AfterBytes is within the budget.
	UnderBudget bool `json:"under_budget"`
	// Items are the removals in the order they were made (or would be):
	// tier by tier, and within a tier least recently used first.
	Items []GCItem `json:"items"`
}

// --- secrets

// SecretRequest sets a secret's value. The value never comes back: no
// endpoint returns it, and the event log records only the name.
type SecretRequest struct {
	Value string `json:"value"`
}

// SecretInfo names a stored secret; its value is never returned.
type SecretInfo struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the reply of a secret listing, by name.
type SecretList struct {
	Secrets []SecretInfo `json:"secrets"`
}

// SecretSet is the reply to setting a secret.
type SecretSet struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Set  bool   `json:"set"`
}
