package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/manager"
)

// ManagerBackend is the Backend of the daemon's /mcp: each tool call is a
// call of the manager, as the /v1 handler of the same operation makes it
// (the same checks, the same events, the same errors). The manager's
// records are the API's shapes (package apitypes), which the Backend
// speaks too.
func ManagerBackend(m *manager.Manager) Backend { return managerBackend{m} }

type managerBackend struct{ m *manager.Manager }

func (b managerBackend) CreateWorkspace(ctx context.Context, req client.CreateWorkspace) (client.Workspace, error) {
	return b.m.CreateWorkspace(ctx, req)
}

func (b managerBackend) UploadWorkspace(ctx context.Context, req client.CreateWorkspace, tarball io.Reader) (client.Workspace, error) {
	return b.m.UploadWorkspace(ctx, req, tarball)
}

func (b managerBackend) ListWorkspaces(ctx context.Context, repo, task string) ([]client.Workspace, error) {
	return b.m.ListWorkspaces(ctx, manager.ListFilter{Repo: repo, Task: task})
}

func (b managerBackend) GetWorkspace(ctx context.Context, id string) (client.Workspace, error) {
	return b.m.GetWorkspace(ctx, id)
}

func (b managerBackend) RemoveWorkspace(ctx context.Context, id string) error {
	return b.m.RemoveWorkspace(ctx, id)
}

func (b managerBackend) Status(ctx context.Context, id string) (client.Status, error) {
	return b.m.Status(ctx, id)
}

func (b managerBackend) ForkN(ctx context.Context, id string, req client.Forks) (client.ForkList, error) {
	wss, err := b.m.ForkWorkspaces(ctx, id, req)
	if err != nil {
		return client.ForkList{}, err
	}
	for i := range wss {
		wss[i].Path = b.m.FilesPath(wss[i])
	}
	return client.ForkList{Parent: id, Forks: wss}, nil
}

func (b managerBackend) Exec(ctx context.Context, ws string, req apitypes.ExecRequest, stdout, stderr io.Writer) (apitypes.ExecResult, error) {
	greq, err := manager.Command(req)
	if err != nil {
		return apitypes.ExecResult{}, err
	}
	// An unknown target is not_found before anything starts.
	if _, err := b.m.ExecTarget(ctx, ws); err != nil {
		return apitypes.ExecResult{}, err
	}
	out, err := b.m.Exec(ctx, ws, greq, strings.NewReader(req.Stdin), stdout, stderr)
	if err != nil {
		return apitypes.ExecResult{}, err
	}
	return out.Result(), nil
}

// files runs fn on the file API of workspace id, naming the workspace in
// its error as /v1 does.
func (b managerBackend) files(ctx context.Context, id string, write bool, fn func(f *fileapi.FS) error) error {
	f, release, err := b.m.Files(ctx, id, write)
	if err != nil {
		return err
	}
	defer release()
	if err := fn(f); err != nil {
		return fmt.Errorf("workspace %s: %w", id, err)
	}
	return nil
}

func (b managerBackend) ReadFileContent(ctx context.Context, ws, path string, r client.Range) (fc apitypes.FileContent, err error) {
	rng := fileapi.Range{FirstLine: r.FirstLine, LastLine: r.LastLine, Offset: r.Offset, Length: r.Length}
	err = b.files(ctx, ws, false, func(f *fileapi.FS) error {
		var buf bytes.Buffer
		got, err := f.ReadRange(ctx, path, rng, &buf)
		if err != nil {
			return err
		}
		fc = fileapi.Content(got, buf.Bytes())
		return nil
	})
	return fc, err
}

func (b managerBackend) WriteFile(ctx context.Context, ws, path string, content io.Reader) (info apitypes.FileInfo, err error) {
	err = b.files(ctx, ws, true, func(f *fileapi.FS) error {
		if info, err = f.Write(ctx, path, content, 0, true); err != nil {
			return err
		}
		b.m.FileChanged(ctx, ws, "written", info.Path, map[string]any{"bytes": info.Size})
		return nil
	})
	return info, err
}

func (b managerBackend) EditFile(ctx context.Context, ws string, req apitypes.EditRequest) (res apitypes.EditResult, err error) {
	err = b.files(ctx, ws, true, func(f *fileapi.FS) error {
		if res, err = f.Edit(ctx, req); err != nil {
			return err
		}
		b.m.FileChanged(ctx, ws, "edited", res.Path, map[string]any{"replacements": res.Replacements, "bytes": res.Size})
		return nil
	})
	return res, err
}

func (b managerBackend) ListTree(ctx context.Context, ws, path string, depth int) (list apitypes.FileList, err error) {
	if path == "" {
		path = "."
	}
	if depth < 1 || depth > fileapi.MaxTreeDepth {
		return list, errdefs.Invalid("depth %d is not a depth between 1 and %d", depth, fileapi.MaxTreeDepth)
	}
	err = b.files(ctx, ws, false, func(f *fileapi.FS) error {
		if depth > 1 {
			if list, err = f.Tree(ctx, path, depth); err != nil {
				return err
			}
			list.Path = path
			return nil
		}
		entries, err := f.List(ctx, path)
		list = apitypes.FileList{Path: path, Depth: 1, Entries: entries}
		return err
	})
	return list, err
}

func (b managerBackend) FindFiles(ctx context.Context, ws string, req apitypes.FindRequest) (res apitypes.FindResult, err error) {
	err = b.files(ctx, ws, false, func(f *fileapi.FS) error {
		res, err = f.Find(ctx, req)
		return err
	})
	return res, err
}

func (b managerBackend) Grep(ctx context.Context, ws string, req client.GrepRequest) (res client.GrepResult, err error) {
	err = b.files(ctx, ws, false, func(f *fileapi.FS) error {
		res, err = f.Grep(ctx, req)
		return err
	})
	return res, err
}

func (b managerBackend) Diff(ctx context.Context, ws string, paths ...string) (client.Diff, error) {
	w, err := b.m.GetWorkspace(ctx, ws)
	if err != nil {
		return client.Diff{}, err
	}
	d, err := b.m.Diff(ctx, ws, paths)
	if err != nil {
		return client.Diff{}, err
	}
	return client.Diff{ID: ws, BaseCommit: w.BaseCommit, Diff: string(d)}, nil
}

func (b managerBackend) Commit(ctx context.Context, ws, message string) (client.CommitResult, error) {
	return b.m.Commit(ctx, ws, message, nil)
}

func (b managerBackend) CheckDiff(ctx context.Context, ws string) (client.DiffReport, error) {
	rep, err := b.m.CheckDiff(ctx, ws, nil)
	rep.ID = ws
	return rep, err
}

func (b managerBackend) AddDependency(ctx context.Context, ws, spec string) (apitypes.Dependency, error) {
	return b.m.AddDependency(ctx, ws, spec)
}

func (b managerBackend) StartProcess(ctx context.Context, ws string, req apitypes.ExecRequest) (apitypes.Process, error) {
	return b.m.StartProcess(ctx, ws, req)
}

func (b managerBackend) ListProcesses(ctx context.Context, ws string) ([]apitypes.Process, error) {
	return b.m.ListProcesses(ctx, ws)
}

func (b managerBackend) ProcessLogs(ctx context.Context, ws, id string, q apitypes.LogQuery) (apitypes.ProcessLogs, error) {
	return b.m.ProcessLogs(ctx, ws, id, q)
}

func (b managerBackend) SignalProcess(ctx context.Context, ws, id, signal string) (apitypes.Process, error) {
	return b.m.SignalProcess(ctx, ws, id, apitypes.ProcessSignal{Signal: signal})
}

func (b managerBackend) WaitProcess(ctx context.Context, ws, id string, timeout time.Duration) (apitypes.Process, error) {
	var w apitypes.ProcessWait
	if timeout > 0 {
		w.Timeout = timeout.String()
	}
	return b.m.WaitProcess(ctx, ws, id, w)
}

func (b managerBackend) PublishPort(ctx context.Context, ws string, port int) (apitypes.Port, error) {
	return b.m.PublishPort(ctx, ws, apitypes.PortRequest{Port: port})
}
