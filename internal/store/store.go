// Package store defines agentbox's state: the records the daemon keeps about
// repos, pristine checkouts, workspaces and events, and the Store interface
// every database implementation satisfies.
//
// The database is the single source of truth (DESIGN.md §2). Implementations
// live in sub-packages (sqlstore, for SQLite and PostgreSQL) and each runs
// the conformance suite in storetest, so callers never depend on which one is
// configured. Errors are classified with internal/errdefs.
package store

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Repo is a cached git remote: a bare mirror cloned once and shared by
// every workspace made from it. The record is the API's (apitypes.Repo).
type Repo = apitypes.Repo

// Pristine is a shared, read-only checkout of one commit of a repo. Overlay
// workspaces use it as their lower layer; it is reference-counted by the
// workspaces that point at it.
type Pristine struct {
	// ID is the stable identifier ("pc_...").
	ID string `json:"id"`
	// RepoID is the repo the checkout was made from.
	RepoID string `json:"repo_id"`
	// Commit is the full object name checked out.
	Commit string `json:"commit"`
	// Path is the host directory of the checkout.
	Path string `json:"path"`
	// SizeBytes is the checkout's disk usage when it was made.
	SizeBytes int64 `json:"size_bytes"`
	// RefCount is the number of workspaces using the checkout. It is derived
	// from the workspaces table, never stored, so it cannot drift.
	RefCount int `json:"ref_count"`
	// CreatedAt is when the checkout finished.
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when a workspace last started using the checkout.
	LastUsedAt time.Time `json:"last_used_at"`
}

// Workspace states.
const (
	// WorkspaceCreating marks a row whose directories and mount are being
	// made. A row left in this state by a crash is rolled back at start.
	WorkspaceCreating = "creating"
	// WorkspaceReady is a usable workspace.
	WorkspaceReady = "ready"
	// WorkspaceRemoving marks a workspace being torn down; a crash leaves it
	// to be finished at start.
	WorkspaceRemoving = "removing"
)

// Workspace is the durable set of files one task works on. The record is
// the API's (apitypes.Workspace) but for Path, which the store does not
// keep: the daemon fills it in from Dir and Driver.
type Workspace = apitypes.Workspace

// Sandbox is one execution environment attached to a workspace.
type Sandbox struct {
	// ID is the stable identifier ("sb_...").
	ID string `json:"id"`
	// WorkspaceID is the workspace mounted at /workspace.
	WorkspaceID string `json:"workspace_id"`
	// Backend is the backend's name; BackendRef its handle (container ID...).
	Backend    string `json:"backend"`
	BackendRef string `json:"backend_ref"`
	// Image is the image or root file system it runs.
	Image string `json:"image"`
	// Spec is the full spec as JSON (sandbox.Spec), so that a replacement
	// gets exactly the same.
	Spec string `json:"spec"`
	// State is a sandbox.State.
	State string `json:"state"`
	// TokenHash is the SHA-256 of the guest's token (hex): a restarted
	// daemon can accept the guest's redial without ever storing the token.
	TokenHash string `json:"-"`
	// Replaces is the sandbox this one replaced, if any.
	Replaces string `json:"replaces,omitempty"`
	// Node is the node that runs the sandbox (set at creation; changed by
	// nothing but the store's ownership methods).
	Node string `json:"node,omitempty"`
	// CreatedAt, UpdatedAt and LastActivityAt are timestamps; activity is
	// any API call that used the sandbox.
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	LastActivityAt time.Time `json:"last_activity_at"`
}

// SandboxFilter selects sandboxes. Zero fields match everything.
type SandboxFilter struct {
	WorkspaceID string
	State       string
}

// Exec states.
const (
	ExecRunning  = "running"
	ExecExited   = "exited"
	ExecTimedOut = "timed_out"
	ExecKilled   = "killed"
	ExecLost     = "lost"
)

// Exec is one command run in a sandbox.
type Exec struct {
	ID          string `json:"id"`
	SandboxID   string `json:"sandbox_id"`
	WorkspaceID string `json:"workspace_id"`
	// Argv is the command as JSON (a list of strings).
	Argv string `json:"argv"`
	// State is one of the Exec* constants.
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	OOM      bool   `json:"oom,omitempty"`
	// Task is the workspace's task label when the command started.
	Task string `json:"task,omitempty"`
	// CPUNanos and PeakMemBytes are the command's usage, when known (see
	// guest.ExecResult: the CPU of its whole tree, the peak of its largest
	// process); WallNanos its wall time.
	CPUNanos     int64 `json:"cpu_ns,omitempty"`
	PeakMemBytes int64 `json:"peak_mem_bytes,omitempty"`
	WallNanos    int64 `json:"wall_ns,omitempty"`
	// StdoutBytes and StderrBytes count the output, dropped bytes included.
	StdoutBytes int64     `json:"stdout_bytes"`
	StderrBytes int64     `json:"stderr_bytes"`
	StartedAt   time.Time `json:"started_at"`
	FinishedAt  time.Time `json:"finished_at"`
}

// ExecFilter selects execs, newest last. Zero fields match everything.
type ExecFilter struct {
	SandboxID   string
	WorkspaceID string
	// Limit caps the result (the most recent ones); 0 means 1000.
	Limit int
}

// Event is one entry of the append-only log: who did what to which object.
// The record is the API's (apitypes.Event).
type Event = apitypes.Event

// EventFilter selects events. Zero fields match everything.
type EventFilter struct {
	RepoID      string
	WorkspaceID string
	SandboxID   string
	Type        string
	// TypePrefix keeps the events whose type starts with it ("candidate.").
	TypePrefix string
	// Actor keeps one actor's events.
	Actor string
	// Object keeps the events of one object: a repo, workspace or sandbox
	// ID, whichever it is.
	Object string
	// AfterID returns only events with a larger ID (for following);
	// BeforeID, when not 0, only events with a smaller one (for paging
	// back from the newest).
	AfterID  int64
	BeforeID int64
	// Newest returns the newest events that match, newest first, instead
	// of the oldest, oldest first.
	Newest bool
	// Limit caps the result; 0 means 1000.
	Limit int
}

// Store is the database behind the daemon. All methods are safe for
// concurrent use. Lookups of a missing object return an error wrapping
// errdefs.ErrNotFound; uniqueness violations wrap errdefs.ErrConflict.
type Store interface {
	CreateRepo(ctx context.Context, r Repo) error
	GetRepo(ctx context.Context, id string) (Repo, error)
	GetRepoByURL(ctx context.Context, url string) (Repo, error)
	ListRepos(ctx context.Context) ([]Repo, error)
	UpdateRepo(ctx context.Context, r Repo) error
	// DeleteRepo removes the repo row and its pristine rows. It fails with
	// ErrConflict while workspaces still reference the repo.
	DeleteRepo(ctx context.Context, id string) error

	CreatePristine(ctx context.Context, p Pristine) error
	GetPristine(ctx context.Context, id string) (Pristine, error)
	FindPristine(ctx context.Context, repoID, commit string) (Pristine, error)
	ListPristines(ctx context.Context, repoID string) ([]Pristine, error)
	TouchPristine(ctx context.Context, id string, at time.Time) error
	// DeletePristine fails with ErrConflict while workspaces reference it.
	DeletePristine(ctx context.Context, id string) error

	CreateWorkspace(ctx context.Context, w Workspace) error
	GetWorkspace(ctx context.Context, id string) (Workspace, error)
	// ListWorkspaces lists all workspaces, or those of one repo.
	ListWorkspaces(ctx context.Context, repoID string) ([]Workspace, error)
	UpdateWorkspace(ctx context.Context, w Workspace) error
	// UpdateWorkspaceEvent is UpdateWorkspace and AppendEvent(ev) in one
	// transaction: a workspace made ready and its event cost one commit.
	UpdateWorkspaceEvent(ctx context.Context, w Workspace, ev Event) (Event, error)
	// SetWorkspaceSandboxSpec records the sandbox spec (JSON) last asked for on a
	// workspace, refused or not; UpdateWorkspace leaves it alone.
	SetWorkspaceSandboxSpec(ctx context.Context, id, spec string) error
	// WorkspaceSandboxSpec returns it: "" when none was asked for.
	WorkspaceSandboxSpec(ctx context.Context, id string) (string, error)
	// DeleteWorkspace fails with ErrConflict while sandbox rows reference it.
	DeleteWorkspace(ctx context.Context, id string) error

	CreateSandbox(ctx context.Context, sb Sandbox) error
	GetSandbox(ctx context.Context, id string) (Sandbox, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, error)
	UpdateSandbox(ctx context.Context, sb Sandbox) error
	// UpdateSandboxEvent is UpdateSandbox and AppendEvent(ev) in one
	// transaction: a state change and its event cost one commit, and
	// neither is recorded without the other.
	UpdateSandboxEvent(ctx context.Context, sb Sandbox, ev Event) (Event, error)
	DeleteSandbox(ctx context.Context, id string) error

	CreateExec(ctx context.Context, e Exec) error
	// FinishExec records an exec's outcome (every field but the IDs, argv
	// and start time) and, in the same transaction, moves its sandbox's
	// last activity forward to e.FinishedAt. Nothing else of the sandbox
	// changes: a state change made while the command ran stands.
	FinishExec(ctx context.Context, e Exec) error
	GetExec(ctx context.Context, id string) (Exec, error)
	ListExecs(ctx context.Context, f ExecFilter) ([]Exec, error)

	AppendEvent(ctx context.Context, e Event) (Event, error)
	ListEvents(ctx context.Context, f EventFilter) ([]Event, error)

	// PutSecret creates or replaces a sealed secret (package secrets seals
	// it; the store never sees a value).
	PutSecret(ctx context.Context, s SealedSecret) error
	GetSecret(ctx context.Context, name string) (SealedSecret, error)
	// ListSecrets returns every secret's name and times, never its sealed
	// value, ordered by name.
	ListSecrets(ctx context.Context) ([]SealedSecret, error)
	DeleteSecret(ctx context.Context, name string) error

	UsageStore
	ReviewStore
	NodeStore
	SolveStore

	Close() error
}

// Candidate is a result up for review (the API's record).
type Candidate = apitypes.Candidate

// ForgeBinding is how the daemon reaches a forge host (the API's record).
type ForgeBinding = apitypes.ForgeBinding

// ReviewStore keeps candidates and forge bindings.
type ReviewStore interface {
	CreateCandidate(ctx context.Context, c Candidate) error
	GetCandidate(ctx context.Context, id string) (Candidate, error)
	// ListCandidates returns a workspace's candidates ("" for all), newest
	// first.
	ListCandidates(ctx context.Context, workspaceID string) ([]Candidate, error)
	// UpdateCandidate replaces a candidate if its disposition is still
	// from: a decision made meanwhile makes it fail with ErrConflict.
	UpdateCandidate(ctx context.Context, c Candidate, from string) error

	// PutForge creates or replaces the binding of a host.
	PutForge(ctx context.Context, f ForgeBinding) error
	GetForge(ctx context.Context, host string) (ForgeBinding, error)
	ListForges(ctx context.Context) ([]ForgeBinding, error)
	DeleteForge(ctx context.Context, host string) error
}

// SolveRun is a run of the agent loop (the API's record).
type SolveRun = apitypes.SolveRun

// SolveStep is one durable step of a run (the API's record).
type SolveStep = apitypes.SolveStep

// SolveStore keeps the agent loop's runs and their steps, so that a run
// resumes from its last completed step after a restart.
type SolveStore interface {
	CreateSolveRun(ctx context.Context, r SolveRun) error
	GetSolveRun(ctx context.Context, id string) (SolveRun, error)
	// ListSolveRuns returns the runs in state ("" for all), newest first.
	ListSolveRuns(ctx context.Context, state string) ([]SolveRun, error)
	// UpdateSolveRun replaces a run if its state is still from: a cancel
	// that won meanwhile makes it fail with ErrConflict.
	UpdateSolveRun(ctx context.Context, r SolveRun, from string) error
	// AppendSolveStep adds a step; a step already recorded at its run,
	// attempt and seq is ErrConflict (two writers of one loop).
	AppendSolveStep(ctx context.Context, s SolveStep) error
	// ListSolveSteps returns a run's steps, by attempt then seq; attempt
	// -1 means every attempt.
	ListSolveSteps(ctx context.Context, runID string, attempt int) ([]SolveStep, error)
}

// SealedSecret is a secret as the store keeps it: encrypted by package
// secrets, which alone holds the key.
type SealedSecret struct {
	Name string `json:"name"`
	// Nonce and Sealed are the AES-GCM nonce and ciphertext; empty in
	// ListSecrets results.
	Nonce     []byte    `json:"-"`
	Sealed    []byte    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}
