package mcpserver

import (
	"context"
	"io"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
)

// Backend is what the tools need of agentbox. Its shapes are the public
// API's (package client's, which alias apitypes where they can), so that
// a tool's structured output is what /v1 answers. Two adapters implement
// it: ClientBackend over the Go client (`agentbox mcp`, stdio) and
// ManagerBackend over the manager (the daemon's /mcp).
//
// Every method returns the errors of the API: classed (errors.Is with
// errdefs' classes), with messages that name the object.
type Backend interface {
	CreateWorkspace(ctx context.Context, req client.CreateWorkspace) (client.Workspace, error)
	// UploadWorkspace makes a workspace whose base commit is the tree in
	// tarball, an uncompressed tar stream.
	UploadWorkspace(ctx context.Context, req client.CreateWorkspace, tarball io.Reader) (client.Workspace, error)
	ListWorkspaces(ctx context.Context, repo, task string) ([]client.Workspace, error)
	GetWorkspace(ctx context.Context, id string) (client.Workspace, error)
	RemoveWorkspace(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (client.Status, error)
	// ForkN makes req.Count forks at once, all or none.
	ForkN(ctx context.Context, id string, req client.Forks) (client.ForkList, error)

	// Exec runs a command in the sandbox of workspace ws (starting one if
	// it has none), streaming its output to stdout and stderr as it
	// arrives. Ending ctx kills the command.
	Exec(ctx context.Context, ws string, req apitypes.ExecRequest, stdout, stderr io.Writer) (apitypes.ExecResult, error)

	ReadFileContent(ctx context.Context, ws, path string, r client.Range) (apitypes.FileContent, error)
	// WriteFile writes content to path atomically and durably, making
	// missing parent directories.
	WriteFile(ctx context.Context, ws, path string, content io.Reader) (apitypes.FileInfo, error)
	EditFile(ctx context.Context, ws string, req apitypes.EditRequest) (apitypes.EditResult, error)
	ListTree(ctx context.Context, ws, path string, depth int) (apitypes.FileList, error)
	FindFiles(ctx context.Context, ws string, req apitypes.FindRequest) (apitypes.FindResult, error)
	Grep(ctx context.Context, ws string, req client.GrepRequest) (client.GrepResult, error)

	Diff(ctx context.Context, ws string, paths ...string) (client.Diff, error)
	// Commit records every change as one commit on the workspace's
	// branch, by the daemon's configured author.
	Commit(ctx context.Context, ws, message string) (client.CommitResult, error)
	// CheckDiff checks the workspace's changes against the policy of its
	// most recent sandbox and for secrets.
	CheckDiff(ctx context.Context, ws string) (client.DiffReport, error)
	// AddDependency admits a package from the operator's approved
	// manifest into the workspace; a denial names the reason.
	AddDependency(ctx context.Context, ws, spec string) (apitypes.Dependency, error)

	// StartProcess starts a command in the sandbox of workspace ws,
	// detached from the call: a background process.
	StartProcess(ctx context.Context, ws string, req apitypes.ExecRequest) (apitypes.Process, error)
	ListProcesses(ctx context.Context, ws string) ([]apitypes.Process, error)
	ProcessLogs(ctx context.Context, ws, id string, q apitypes.LogQuery) (apitypes.ProcessLogs, error)
	// SignalProcess sends signal (a name or number; empty: TERM) to the
	// process's whole tree.
	SignalProcess(ctx context.Context, ws, id, signal string) (apitypes.Process, error)
	// WaitProcess waits up to timeout for the process to end.
	WaitProcess(ctx context.Context, ws, id string, timeout time.Duration) (apitypes.Process, error)
	// PublishPort makes port of the workspace's sandbox reachable from
	// the daemon's host, without giving the sandbox a route out.
	PublishPort(ctx context.Context, ws string, port int) (apitypes.Port, error)
}

// DirUploader is the optional ability of a backend that runs on the
// caller's machine (`agentbox mcp` over stdio) to upload one of its
// directories as a workspace's base. The daemon's /mcp has no such
// ability: a path named by a remote caller must never be read on the
// daemon's host.
type DirUploader interface {
	UploadDir(ctx context.Context, req client.CreateWorkspace, dir string) (client.Workspace, error)
}
