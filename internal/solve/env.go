package solve

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/manager"
)

// WorkspaceEnv is the Env of a workspace: files through the manager's
// file API (which confines every path to the workspace, fd-relative, with
// no symlink followed out), commands through its sandbox.
type WorkspaceEnv struct {
	M  *manager.Manager
	WS string
}

// maxFindFiles bounds the file list a planner sees.
const maxFindFiles = 2000

func (e WorkspaceEnv) Files(ctx context.Context) ([]string, error) {
	return e.List(ctx, "", "*", maxFindFiles)
}

// capWriter keeps the first max bytes written and drops the rest.
type capWriter struct {
	buf bytes.Buffer
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (e WorkspaceEnv) ReadFile(ctx context.Context, p string, max int) (string, error) {
	fs, release, err := e.M.Files(ctx, e.WS, false)
	if err != nil {
		return "", err
	}
	defer release()
	w := &capWriter{max: max}
	if _, err := fs.Read(ctx, p, w); err != nil {
		return "", err
	}
	return w.buf.String(), nil
}

func (e WorkspaceEnv) Edit(ctx context.Context, ed Edit) error {
	fs, release, err := e.M.Files(ctx, e.WS, true)
	if err != nil {
		return err
	}
	defer release()
	if ed.Old == "" {
		_, err = fs.Write(ctx, ed.Path, strings.NewReader(ed.New), 0o644, true)
		return err
	}
	_, err = fs.Edit(ctx, apitypes.EditRequest{Path: ed.Path, Old: ed.Old, New: ed.New})
	return err
}

// execOutput is what an execution keeps of each stream before redaction
// and bounding.
const execOutput = 256 << 10

func (e WorkspaceEnv) Exec(ctx context.Context, cmd string, timeout time.Duration) (apitypes.ExecOutput, error) {
	// No bytecode cache: Python checks a cached module by its source's
	// mtime in seconds and its size, and an edit of the same size within
	// the second (a - b to a + b) would run the stale code.
	req := apitypes.ExecRequest{Sh: cmd, MaxOutputBytes: execOutput, Env: []string{"PYTHONDONTWRITEBYTECODE=1"}}
	if timeout > 0 {
		req.Timeout = timeout.String()
	}
	return e.M.ExecBuffered(ctx, e.WS, req, nil)
}

// ReadLines reads lines of a file through the file API, which refuses
// what is not a regular file inside the workspace.
func (e WorkspaceEnv) ReadLines(ctx context.Context, p string, first, last, max int) (string, error) {
	fs, release, err := e.M.Files(ctx, e.WS, false)
	if err != nil {
		return "", err
	}
	defer release()
	w := &capWriter{max: max}
	if _, err := fs.ReadRange(ctx, p, fileapi.Range{FirstLine: first, LastLine: last}, w); err != nil {
		return "", err
	}
	return w.buf.String(), nil
}

// Grep searches the workspace through the file API (no symlink followed,
// .git skipped).
func (e WorkspaceEnv) Grep(ctx context.Context, pattern, p string, max int) ([]GrepLine, error) {
	fs, release, err := e.M.Files(ctx, e.WS, false)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := fs.Grep(ctx, apitypes.GrepRequest{Pattern: pattern, Path: p, MaxMatches: max})
	if err != nil {
		return nil, err
	}
	out := make([]GrepLine, 0, len(res.Matches))
	for _, m := range res.Matches {
		out = append(out, GrepLine{Path: m.Path, Line: m.Line, Text: m.Text})
	}
	return out, nil
}

// List lists the workspace's files under dir matching glob, .git left out.
func (e WorkspaceEnv) List(ctx context.Context, dir, glob string, max int) ([]string, error) {
	fs, release, err := e.M.Files(ctx, e.WS, false)
	if err != nil {
		return nil, err
	}
	defer release()
	if glob == "" {
		glob = "*"
	}
	res, err := fs.Find(ctx, apitypes.FindRequest{Pattern: glob, Path: dir, Type: "file", MaxResults: max})
	if err != nil {
		return nil, fmt.Errorf("listing workspace %s: %w", e.WS, err)
	}
	out := make([]string, 0, len(res.Matches))
	for _, f := range res.Matches {
		if f.Path == ".git" || strings.HasPrefix(f.Path, ".git/") {
			continue
		}
		out = append(out, f.Path)
	}
	return out, nil
}

var _ Browser = WorkspaceEnv{}
