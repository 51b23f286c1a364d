package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
)

// ManagerBackend is the Backend of the daemon's /mcp: each tool call is a
// call of the manager, as the /v1 handler of the same operation makes it
// (the same checks, the same events, the same errors).
//
// The manager's own records become the API's shapes through their JSON
// form, which is exactly what /v1 sends for them: the two surfaces cannot
// drift apart, and this package needs none of the store's types.
func ManagerBackend(m *manager.Manager) Backend { return managerBackend{m} }

type managerBackend struct{ m *manager.Manager }

// wire converts v to out through v's JSON form.
func wire[T any](v any, err error) (T, error) {
	var out T
	if err != nil {
		return out, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out, err
	}
	return out, json.Unmarshal(b, &out)
}

func (b managerBackend) createRequest(req client.CreateWorkspace) (manager.CreateRequest, error) {
	cr := manager.CreateRequest{Repo: req.Repo, Empty: req.Empty, Ref: req.Ref, Branch: req.Branch, Task: req.Task, Driver: req.Driver}
	if req.Disk != "" {
		d, err := policy.ParseByteSize(req.Disk)
		if err != nil {
			return cr, errdefs.Invalid("disk: %v", err)
		}
		cr.Disk = d
	}
	return cr, nil
}

func (b managerBackend) CreateWorkspace(ctx context.Context, req client.CreateWorkspace) (client.Workspace, error) {
	cr, err := b.createRequest(req)
	if err != nil {
		return client.Workspace{}, err
	}
	ws, err := b.m.CreateWorkspace(ctx, cr)
	return wire[client.Workspace](ws, err)
}

func (b managerBackend) UploadWorkspace(ctx context.Context, req client.CreateWorkspace, tarball io.Reader) (client.Workspace, error) {
	cr, err := b.createRequest(req)
	if err != nil {
		return client.Workspace{}, err
	}
	ws, err := b.m.UploadWorkspace(ctx, cr, tarball)
	return wire[client.Workspace](ws, err)
}

func (b managerBackend) ListWorkspaces(ctx context.Context, repo, task string) ([]client.Workspace, error) {
	wss, err := b.m.ListWorkspaces(ctx, manager.ListFilter{Repo: repo, Task: task})
	return wire[[]client.Workspace](wss, err)
}

func (b managerBackend) GetWorkspace(ctx context.Context, id string) (client.Workspace, error) {
	ws, err := b.m.GetWorkspace(ctx, id)
	return wire[client.Workspace](ws, err)
}

func (b managerBackend) RemoveWorkspace(ctx context.Context, id string) error {
	return b.m.RemoveWorkspace(ctx, id)
}

func (b managerBackend) Status(ctx context.Context, id string) (client.Status, error) {
	st, err := b.m.Status(ctx, id)
	return wire[client.Status](st, err)
}

func (b managerBackend) Fork(ctx context.Context, id string, req client.Fork) (client.Workspace, error) {
	fr := manager.ForkRequest{Branch: req.Branch, Task: req.Task}
	if req.Disk != "" {
		d, err := policy.ParseByteSize(req.Disk)
		if err != nil {
			return client.Workspace{}, errdefs.Invalid("disk: %v", err)
		}
		fr.Disk = d
	}
	ws, err := b.m.ForkWorkspace(ctx, id, fr)
	return wire[client.Workspace](ws, err)
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

func (b managerBackend) Grep(ctx context.Context, ws string, req client.GrepRequest) (client.GrepResult, error) {
	var res fileapi.GrepResult
	err := b.files(ctx, ws, false, func(f *fileapi.FS) error {
		var err error
		res, err = f.Grep(ctx, fileapi.GrepRequest{
			Pattern: req.Pattern, Path: req.Path, IgnoreCase: req.IgnoreCase,
			MaxMatches: req.MaxMatches, MaxFileBytes: req.MaxFileBytes, IncludeGit: req.IncludeGit,
		})
		return err
	})
	return wire[client.GrepResult](res, err)
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
	res, err := b.m.Commit(ctx, ws, message, nil)
	return wire[client.CommitResult](res, err)
}

func (b managerBackend) CheckDiff(ctx context.Context, ws string) (client.DiffReport, error) {
	rep, err := b.m.CheckDiff(ctx, ws, nil)
	out, err := wire[client.DiffReport](rep, err)
	out.ID = ws
	return out, err
}
