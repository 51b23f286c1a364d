package mcpserver

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// ClientBackend is the Backend of `agentbox mcp`: every tool call is a
// request to the daemon through the Go client, which runs on the caller's
// machine and may therefore upload the caller's directories.
func ClientBackend(c *client.Client) Backend { return clientBackend{c} }

type clientBackend struct{ *client.Client }

var _ DirUploader = clientBackend{}

func (b clientBackend) WriteFile(ctx context.Context, ws, path string, content io.Reader) (apitypes.FileInfo, error) {
	return b.Client.WriteFile(ctx, ws, path, content, 0, true)
}

func (b clientBackend) UploadWorkspace(ctx context.Context, req client.CreateWorkspace, tarball io.Reader) (client.Workspace, error) {
	return b.Client.UploadWorkspace(ctx, req, tarball, false)
}

func (b clientBackend) Commit(ctx context.Context, ws, message string) (client.CommitResult, error) {
	return b.Client.Commit(ctx, ws, message, nil)
}

func (b clientBackend) CheckDiff(ctx context.Context, ws string) (client.DiffReport, error) {
	return b.Client.CheckDiff(ctx, ws, nil)
}

func (b clientBackend) ProcessLogs(ctx context.Context, ws, id string, q apitypes.LogQuery) (apitypes.ProcessLogs, error) {
	return b.Client.ProcessLogs(ctx, ws, id, client.LogOptions{Stream: q.Stream, Offset: q.Offset, Limit: q.Limit})
}

// UploadDir uploads dir, relative to this process's working directory
// (the agent's project, for an MCP client that starts `agentbox mcp` in
// it), with this process's permissions.
func (b clientBackend) UploadDir(ctx context.Context, req client.CreateWorkspace, dir string) (client.Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return client.Workspace{}, errdefs.Invalid("from_dir %q: %v", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return client.Workspace{}, errdefs.Invalid("from_dir: %v", err)
	case !fi.IsDir():
		return client.Workspace{}, errdefs.Invalid("from_dir %s is not a directory", abs)
	}
	return b.Client.UploadDir(ctx, req, abs, nil)
}
