package apitypes

import (
	"encoding/json"
	"time"
)

// --- workspaces

// Workspace is the durable set of files one task works on.
type Workspace struct {
	// ID is the stable identifier ("ws_...").
	ID string `json:"id"`
	// RepoID is the repo the workspace was made from.
	RepoID string `json:"repo_id"`
	// PristineID is the lower layer of an overlay workspace; empty for copy.
	PristineID string `json:"pristine_id,omitempty"`
	// ParentID is the workspace this one was forked from, if any.
	ParentID string `json:"parent_id,omitempty"`
	// Ref is the ref the caller asked for (branch, tag or commit).
	Ref string `json:"ref"`
	// BaseCommit is the commit the workspace started from; diffs are against it.
	BaseCommit string `json:"base_commit"`
	// Branch is the workspace's own branch.
	Branch string `json:"branch"`
	// Task is the caller's free-form label, used to group cost and results.
	Task string `json:"task,omitempty"`
	// Driver is "overlay" or "copy".
	Driver string `json:"driver" enum:"overlay,copy"`
	// Dir is the workspace's host directory; the files are at Dir/merged for
	// overlay and Dir/tree for copy.
	Dir string `json:"dir"`
	// State is creating, ready or removing.
	State string `json:"state" enum:"creating,ready,removing"`
	// Dirty is true when the files differ from the base commit, as last
	// computed (by status or diff): the workspace holds work, committed on
	// its branch or not, that exists nowhere else. Collectors keep it.
	Dirty bool `json:"dirty"`
	// SizeBytes is the workspace's own disk usage, as last measured.
	SizeBytes int64 `json:"size_bytes"`
	// DiskQuota is the size in bytes of the workspace's own file system,
	// which holds everything the workspace adds to its base (the overlay
	// driver's upper layer, the copy driver's whole tree); writes past it
	// fail with ENOSPC. 0 means no quota (the files sit on the data dir's
	// file system).
	DiskQuota int64 `json:"disk_quota,omitempty"`
	// CreatedAt is when the workspace was created.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time `json:"updated_at"`
	// Node is the node (daemon) that owns the workspace: its files are on
	// that node's disk, and any node forwards requests about it there.
	Node string `json:"node,omitempty"`
	// Path is the host path of the workspace's files. The daemon fills it
	// in its replies; the store does not keep it (it follows from Dir and
	// Driver).
	Path string `json:"path"`
}

// CreateWorkspaceRequest asks for a new workspace: of a repo (Repo, Ref),
// or empty (Empty: a fresh repository holding one empty commit). An
// uploaded directory (a tar body) takes Branch, Task, Driver and Disk as
// query parameters instead.
type CreateWorkspaceRequest struct {
	// Repo is a repo ID or a URL (added to the cache if needed).
	Repo string `json:"repo,omitempty"`
	// Empty asks for a scratch workspace instead: a fresh repository
	// holding one empty commit (no Repo, no Ref).
	Empty bool `json:"empty,omitempty"`
	// Ref is a branch, tag or commit; empty means the default branch.
	Ref string `json:"ref,omitempty"`
	// Branch is the workspace's own branch; default agentbox/<id>.
	Branch string `json:"branch,omitempty"`
	// Task is a free-form label.
	Task string `json:"task,omitempty"`
	// Driver overrides the default driver ("overlay" or "copy").
	Driver string `json:"driver,omitempty" enum:"overlay,copy"`
	// Disk is the workspace's disk quota ("2G"); empty: the daemon's
	// default. What the workspace adds to its base stops there (ENOSPC).
	Disk ByteSize `json:"disk,omitempty"`
}

// ForkRequest asks for a copy of a workspace on a new branch.
type ForkRequest struct {
	Branch string `json:"branch,omitempty"`
	Task   string `json:"task,omitempty"`
	// Disk is the fork's disk quota; empty: the parent's (or, if it has
	// none, the daemon's default). The parent's own changes must fit.
	Disk ByteSize `json:"disk,omitempty"`
}

// ForksRequest asks for several copies of a workspace at once, all or
// none. With a Branch, fork i (from 1) is on BRANCH-i.
type ForksRequest struct {
	ForkRequest
	// Count is how many copies, 1 to MaxForks.
	Count int `json:"count"`
}

// MaxForks is how many copies one request makes at most.
const MaxForks = 16

// ForkList is the reply of a request for several forks.
type ForkList struct {
	Parent string      `json:"parent"`
	Forks  []Workspace `json:"forks"`
}

// WorkspaceList is the reply of a workspace listing.
type WorkspaceList struct {
	Workspaces []Workspace `json:"workspaces"`
}

// Change is one changed path relative to the base commit.
type Change struct {
	// Status is A (added), M (modified), D (deleted), T (type changed).
	Status string `json:"status"`
	Path   string `json:"path"`
}

// DiskUsage is what a workspace has used of its disk quota.
type DiskUsage struct {
	// Quota is the volume's size in bytes.
	Quota int64 `json:"quota_bytes"`
	// Used and Free are bytes of the file system (Used includes ext4's
	// own metadata).
	Used int64 `json:"used_bytes"`
	Free int64 `json:"free_bytes"`
	// Files and FilesFree count inodes.
	Files     int64 `json:"files"`
	FilesFree int64 `json:"files_free"`
}

// Status describes a workspace's files relative to its base.
type Status struct {
	ID         string   `json:"id"`
	Branch     string   `json:"branch"`
	Head       string   `json:"head"`
	BaseCommit string   `json:"base_commit"`
	Dirty      bool     `json:"dirty"`
	Changes    []Change `json:"changes"`
	// Disk is the usage of the workspace's quota, when it has one.
	Disk *DiskUsage `json:"disk,omitempty"`
}

// Diff is a workspace's unified diff against its base commit.
type Diff struct {
	ID         string `json:"id"`
	BaseCommit string `json:"base_commit"`
	Diff       string `json:"diff"`
	// Format is "patch" when Diff is an mbox of format-patch messages
	// (format=patch): the commits the host made on the branch, then the
	// uncommitted change as one more.
	Format string `json:"format,omitempty"`
	// Note says what a patch leaves out or folds together, when anything.
	Note string `json:"note,omitempty"`
}

// Author is a commit identity.
type Author struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
}

// CommitRequest records every change as one commit on the workspace's
// branch.
type CommitRequest struct {
	Message string `json:"message"`
	// Author defaults to the daemon's configured identity.
	Author *Author `json:"author,omitempty"`
	// Force commits a diff that fails the check (paths outside the
	// writable paths, secrets): the commit is refused otherwise. A forced
	// commit is recorded, with its findings, in the event log.
	Force bool `json:"force,omitempty"`
}

// CommitResult names the commit made.
type CommitResult struct {
	ID     string `json:"id"`
	Commit string `json:"commit"`
	Branch string `json:"branch"`
	// Forced is set when the diff failed the check and Force committed it
	// anyway; Findings are what the check found.
	Forced   bool        `json:"forced,omitempty"`
	Findings *DiffReport `json:"findings,omitempty"`
}

// --- diff check

// DiffCheckRequest is the optional body of a diff check.
type DiffCheckRequest struct {
	// Policy is a policy document whose writable paths the result is
	// checked against, read strictly; none means the policy of the
	// workspace's most recent sandbox.
	Policy json.RawMessage `json:"policy,omitempty" schema:"Policy"`
}

// DiffReport is the outcome of a check of a workspace's result before it
// leaves: changed paths outside the policy's writable paths, and added
// lines that look like secrets. A report that found problems is not an
// error: see OK.
type DiffReport struct {
	// ID is the workspace checked (the daemon fills it in its reply).
	ID string `json:"id"`
	// OK is true when nothing was found.
	OK bool `json:"ok"`
	// OutsideWritable are the changed paths the policy does not let the
	// sandbox change, by path.
	OutsideWritable []PathFinding `json:"outside_writable"`
	// Secrets are the added lines that look like secrets, by path, then
	// line, then column.
	Secrets []SecretFinding `json:"secrets"`
	// Truncated says a list was cut short (at 1000 findings).
	Truncated bool `json:"truncated,omitempty"`
}

// PathFinding is one changed path outside the writable paths.
type PathFinding struct {
	// Path is relative to the workspace.
	Path string `json:"path"`
	// Status is the change: A, M, D, T from the change list, or R when
	// only the diff shows the path, as one side of a rename.
	Status string `json:"status"`
	// RenamedFrom is set when Path is the new name of a renamed file.
	RenamedFrom string `json:"renamed_from,omitempty"`
	// RenamedTo is set when Path is the old name of a renamed file: the
	// rename removes it, which is a change too.
	RenamedTo string `json:"renamed_to,omitempty"`
}

// SecretFinding is one added line that looks like it holds a secret.
type SecretFinding struct {
	// Path is the file's path after the change.
	Path string `json:"path"`
	// Line is the line number in the new file, from 1.
	Line int `json:"line"`
	// Column is the byte offset of the match in the line, from 1.
	Column int `json:"column"`
	// Kind is aws-access-key-id, aws-secret-access-key, github-token,
	// slack-token, google-api-key, stripe-live-key, private-key, jwt or
	// known-secret (a value of a stored secret).
	Kind string `json:"kind"`
	// Excerpt is the match redacted ("AKIA…(20 bytes)"): never the whole
	// value.
	Excerpt string `json:"excerpt"`
}
