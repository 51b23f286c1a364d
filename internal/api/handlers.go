package api

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/workspace"
)

// view is the API's workspace: the record with the host path of its files.
func (s *Server) view(w store.Workspace) apitypes.Workspace {
	w.Path = s.m.FilesPath(w)
	return w
}

// --- repos

// ndjsonProgress streams git's progress as {"progress": "..."} lines.
type ndjsonProgress struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	enc *json.Encoder
}

func newNDJSON(w http.ResponseWriter) *ndjsonProgress {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	return &ndjsonProgress{w: w, enc: json.NewEncoder(w)}
}

func (p *ndjsonProgress) send(v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enc.Encode(v)
	if f, ok := p.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (p *ndjsonProgress) Write(b []byte) (int, error) {
	for _, line := range strings.FieldsFunc(string(b), func(r rune) bool { return r == '\r' || r == '\n' }) {
		if line = strings.TrimSpace(line); line != "" {
			p.send(apitypes.RepoProgress{Progress: line})
		}
	}
	return len(b), nil
}

func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/x-ndjson")
}

func (s *Server) addRepo(w http.ResponseWriter, r *http.Request) {
	var req apitypes.AddRepoRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if wantsStream(r) {
		p := newNDJSON(w)
		repo, cloned, err := s.m.AddRepo(r.Context(), req.URL, p)
		if err != nil {
			p.send(apitypes.RepoProgress{Error: errorDetail(err)})
			return
		}
		p.send(apitypes.RepoProgress{Result: &apitypes.RepoResult{Repo: repo, Cloned: cloned}})
		return
	}
	repo, cloned, err := s.m.AddRepo(r.Context(), req.URL, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if cloned {
		status = http.StatusCreated
	}
	writeJSON(w, status, apitypes.RepoResult{Repo: repo, Cloned: cloned})
}

func (s *Server) listRepos(w http.ResponseWriter, r *http.Request) {
	repos, err := s.m.ListRepos(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if repos == nil {
		repos = []apitypes.Repo{}
	}
	writeJSON(w, 200, apitypes.RepoList{Repos: repos})
}

func (s *Server) getRepo(w http.ResponseWriter, r *http.Request) {
	repo, err := s.m.GetRepo(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, repo)
}

func (s *Server) fetchRepo(w http.ResponseWriter, r *http.Request) {
	var req apitypes.FetchRepoRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	if wantsStream(r) {
		p := newNDJSON(w)
		repo, err := s.m.FetchRepo(r.Context(), r.PathValue("id"), req.URL, p)
		if err != nil {
			p.send(apitypes.RepoProgress{Error: errorDetail(err)})
			return
		}
		p.send(apitypes.RepoProgress{Result: &apitypes.RepoResult{Repo: repo}})
		return
	}
	repo, err := s.m.FetchRepo(r.Context(), r.PathValue("id"), req.URL, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.RepoResult{Repo: repo})
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid("query parameter %s=%q is not a boolean", name, v)
	}
	return b, nil
}

func (s *Server) removeRepo(w http.ResponseWriter, r *http.Request) {
	force, err := boolParam(r, "force")
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	repo, err := s.m.GetRepo(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if force && s.fwd != nil {
		// The repo's workspaces on other nodes go first, each removed
		// by its node; the manager removes this node's.
		if err := s.removeElsewhere(r.Context(), repo.ID); err != nil {
			writeError(w, fmt.Errorf("removing repo %s: %w", repo.ID, err))
			return
		}
	}
	if err := s.m.RemoveRepo(r.Context(), repo.ID, force); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.Removed{ID: repo.ID, Removed: true})
}

// --- workspaces

// Media types of an uploaded directory: a tar stream, plain or gzipped.
const (
	tarType  = "application/x-tar"
	gzipType = "application/gzip"
)

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request) {
	switch mediaType(r.Header.Get("Content-Type")) {
	case tarType, gzipType, "application/x-gzip":
		s.uploadWorkspace(w, r)
		return
	}
	var req manager.CreateRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	ws, err := s.m.CreateWorkspace(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.view(ws))
}

// uploadWorkspace makes a workspace from the directory tree in the body, a
// tar stream; its options are query parameters (branch, task, driver,
// disk), as the body is the archive.
func (s *Server) uploadWorkspace(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := manager.CreateRequest{Branch: q.Get("branch"), Task: q.Get("task"), Driver: q.Get("driver")}
	for name := range q {
		switch name {
		case "branch", "task", "driver", "disk":
		default:
			writeError(w, errdefs.Invalid("query parameter %s is not an option of an upload (branch, task, driver, disk)", name))
			return
		}
	}
	if v := q.Get("disk"); v != "" {
		d, err := policy.ParseByteSize(v)
		if err != nil {
			writeError(w, errdefs.Invalid("query parameter disk: %v", err))
			return
		}
		req.Disk = d
	}
	// The archive's own limits (entries, bytes of files) bound what is
	// unpacked; this bounds what is read to get there.
	var body io.Reader = http.MaxBytesReader(w, r.Body, 2*manager.MaxUploadBytes)
	if ct := mediaType(r.Header.Get("Content-Type")); ct != tarType || r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeError(w, errdefs.Invalid("uploaded directory: not a gzip stream: %v", err))
			return
		}
		defer zr.Close()
		body = zr
	}
	ws, err := s.m.UploadWorkspace(r.Context(), req, body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.view(ws))
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	wss, err := s.m.ListWorkspaces(r.Context(), manager.ListFilter{Repo: q.Get("repo"), Task: q.Get("task")})
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]apitypes.Workspace, 0, len(wss))
	for _, ws := range wss {
		out = append(out, s.view(ws))
	}
	writeJSON(w, 200, apitypes.WorkspaceList{Workspaces: out})
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request) {
	ws, err := s.m.GetWorkspace(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, s.view(ws))
}

func (s *Server) removeWorkspace(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.m.RemoveWorkspace(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.Removed{ID: id, Removed: true})
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st, err := s.m.Status(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, st)
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ws, err := s.m.GetWorkspace(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	switch format := r.URL.Query().Get("format"); format {
	case "", "unified":
	case "patch":
		if len(r.URL.Query()["path"]) > 0 {
			writeError(w, errdefs.Invalid("a patch is of the whole workspace: no paths"))
			return
		}
		p, e, err := s.m.Patch(r.Context(), id)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, 200, apitypes.Diff{ID: id, BaseCommit: ws.BaseCommit, Diff: string(p), Format: "patch", Note: exportNote(e)})
		return
	default:
		writeError(w, errdefs.Invalid("diff format %q is not unified or patch", format))
		return
	}
	d, err := s.m.Diff(r.Context(), id, r.URL.Query()["path"])
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.Diff{ID: id, BaseCommit: ws.BaseCommit, Diff: string(d)})
}

// exportNote says what an export folds together, or "".
func exportNote(e workspace.Export) string {
	if e.Foreign {
		return "HEAD is a commit made inside the sandbox, which the host does not read: its change is exported as one commit from the last commit agentbox made"
	}
	return ""
}

func (s *Server) bundle(w http.ResponseWriter, r *http.Request) {
	b, e, err := s.m.Bundle(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", binaryType)
	w.Header().Set("Agentbox-Branch", e.Branch)
	w.Header().Set("Agentbox-Tip", e.Tip)
	w.Header().Set("Agentbox-Base", e.Base)
	if note := exportNote(e); note != "" {
		w.Header().Set("Agentbox-Note", note)
	}
	w.Write(b)
}

func (s *Server) commit(w http.ResponseWriter, r *http.Request) {
	var req apitypes.CommitRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	res, err := s.m.CommitWith(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, res)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req manager.ForkRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	ws, err := s.m.ForkWorkspace(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.view(ws))
}

func (s *Server) forks(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ForksRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	wss, err := s.m.ForkWorkspaces(r.Context(), id, req)
	if err != nil {
		writeError(w, err)
		return
	}
	out := apitypes.ForkList{Parent: id, Forks: make([]apitypes.Workspace, len(wss))}
	for i, ws := range wss {
		out.Forks[i] = s.view(ws)
	}
	writeJSON(w, http.StatusCreated, out)
}

// --- events

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.EventFilter{RepoID: q.Get("repo"), WorkspaceID: q.Get("workspace"), SandboxID: q.Get("sandbox"), Type: q.Get("type")}
	for name, dst := range map[string]*int64{"after": &f.AfterID} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeError(w, errdefs.Invalid("query parameter %s=%q is not a non-negative integer", name, v))
				return
			}
			*dst = n
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 10000 {
			writeError(w, errdefs.Invalid("query parameter limit=%q must be between 1 and 10000", v))
			return
		}
		f.Limit = n
	}
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	if follow {
		s.followEvents(w, r, f)
		return
	}
	ev, err := s.m.Events(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	if ev == nil {
		ev = []apitypes.Event{}
	}
	writeJSON(w, 200, apitypes.EventList{Events: ev})
}

// lazyWriter commits a 200 with the given content type on the first byte,
// so that an error found before any data still gets a JSON error reply.
type lazyWriter struct {
	w       http.ResponseWriter
	ctype   string
	started bool
}

func (l *lazyWriter) Write(b []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.ctype)
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(b)
}

var _ io.Writer = (*lazyWriter)(nil)
