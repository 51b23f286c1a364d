package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Bounds of the control API, as E2B's.
const (
	defaultTimeout = 300 * time.Second
	maxTimeout     = 24 * time.Hour
	// maxListLimit is the most sandboxes one page lists (E2B's limit).
	maxListLimit = 100
	// Metadata keys that pick the workspace: a cached repo (ID or URL)
	// and a ref in it.
	metaRepo = "agentbox.repo"
	metaRef  = "agentbox.ref"
	// clientID is what E2B's API calls the cluster node; agentbox has one.
	clientID = "agentbox"
)

func (s *Server) controlMux() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := s.authorized(r); err != nil {
				writeError(w, err)
				return
			}
			if err := h(w, r); err != nil {
				writeError(w, err)
			}
		})
	}
	handle("POST /sandboxes", s.createSandbox)
	handle("POST /v2/sandboxes", s.createSandbox)
	handle("GET /sandboxes", s.listSandboxes)
	handle("GET /v2/sandboxes", s.listSandboxes)
	handle("GET /sandboxes/{id}", s.getSandbox)
	handle("DELETE /sandboxes/{id}", s.killSandbox)
	handle("POST /sandboxes/{id}/timeout", s.setTimeout)
	handle("POST /sandboxes/{id}/refreshes", s.refresh)
	handle("POST /sandboxes/{id}/pause", s.pauseSandbox)
	handle("POST /sandboxes/{id}/resume", s.connectSandbox)
	handle("POST /sandboxes/{id}/connect", s.connectSandbox)
	handle("POST /v2/sandboxes/{id}/connect", s.connectSandbox)
	handle("GET /sandboxes/{id}/metrics", s.sandboxMetrics)
	handle("GET /sandboxes/{id}/logs", s.absent("sandbox logs (read a process's output through commands, or agentbox's own API)"))
	handle("PUT /sandboxes/{id}/network", s.absent("changing a sandbox's network (agentbox sets the egress policy when the sandbox is created)"))
	handle("POST /sandboxes/{id}/snapshots", s.absent("snapshots (pause keeps the files; fork the workspace through agentbox's API)"))
	handle("GET /snapshots", s.absent("snapshots"))
	handle("POST /sandboxes/{id}/fork", s.absent("forking a running sandbox (fork its workspace through agentbox's API: `agentbox ws fork`)"))
	handle("/templates", s.absent("building templates (map template IDs to images in the daemon's e2b_templates)"))
	handle("/templates/", s.absent("building templates (map template IDs to images in the daemon's e2b_templates)"))
	handle("/volumes", s.absent("volumes"))
	handle("/volumes/", s.absent("volumes"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("no E2B API route %s %s on agentbox: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return mux
}

// absent answers a call of an E2B feature agentbox does not have.
func (s *Server) absent(what string) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("%s: %w", what, errNotImplemented)
	}
}

// sandboxReply is E2B's Sandbox: the reply to create and connect.
type sandboxReply struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	Alias           string `json:"alias,omitempty"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
}

// sandboxDetail is E2B's SandboxDetail and ListedSandbox.
type sandboxDetail struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias,omitempty"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	AllowInternetAccess bool              `json:"allowInternetAccess"`
	VolumeMounts        []any             `json:"volumeMounts"`
}

func (rec record) reply() sandboxReply {
	return sandboxReply{TemplateID: rec.TemplateID, SandboxID: rec.ID, Alias: rec.Alias, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: rec.EnvdToken}
}

func (rec record) detail() sandboxDetail {
	md := rec.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return sandboxDetail{TemplateID: rec.TemplateID, Alias: rec.Alias, SandboxID: rec.ID, ClientID: clientID,
		StartedAt: rec.StartedAt, EndAt: rec.EndAt, EnvdVersion: EnvdVersion, CPUCount: rec.CPUs, MemoryMB: rec.MemoryMB,
		Metadata: md, State: rec.State, AllowInternetAccess: rec.AllowInternet, VolumeMounts: []any{}}
}

// createRequest is E2B's NewSandbox. Fields agentbox cannot honour are
// read so that asking for them is refused, never ignored.
type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      json.RawMessage `json:"network"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

// decode reads a JSON body of at most 1 MiB. Unknown fields are allowed:
// E2B's API grows fields its SDKs send as null.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	err := json.NewDecoder(r.Body).Decode(v)
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF) && optional:
		return nil
	case errors.Is(err, io.EOF):
		return errdefs.Invalid("request body is empty; a JSON object is required")
	case errors.As(err, &mbe):
		return fmt.Errorf("request body over %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
	}
	return errdefs.Invalid("request body: %v", err)
}

// present says a raw JSON field carries something (not absent, null, {}
// or []).
func present(raw json.RawMessage) bool {
	switch strings.TrimSpace(string(raw)) {
	case "", "null", "{}", "[]":
		return false
	}
	return true
}

func timeoutOf(sec *int64, def time.Duration) (time.Duration, error) {
	if sec == nil {
		return def, nil
	}
	d := time.Duration(*sec) * time.Second
	if *sec < 0 || d > maxTimeout {
		return 0, errdefs.Invalid("timeout %d s is outside 0..%d", *sec, int64(maxTimeout/time.Second))
	}
	return d, nil
}

// template resolves a template ID.
func (s *Server) template(id string) (Template, error) {
	t, ok := s.opts.Templates[id]
	if !ok && id != "base" {
		names := []string{"base"}
		for n := range s.opts.Templates {
			if n != "base" {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		return Template{}, fmt.Errorf("template %q %w: this daemon maps %s to images (config e2b_templates)", id, errdefs.ErrNotFound, strings.Join(names, ", "))
	}
	if t.User == "" {
		t.User = "user"
	}
	if t.Home == "" {
		t.Home = "/workspace"
	}
	return t, nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var req createRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	switch {
	case present(req.Network):
		return fmt.Errorf("network rules (allowOut, denyOut, rules): agentbox's egress is allow_internet_access (the daemon's allowlist) or nothing: %w", errNotImplemented)
	case present(req.MCP):
		return fmt.Errorf("the MCP gateway (agentbox serves MCP itself at /mcp): %w", errNotImplemented)
	case present(req.IAM):
		return fmt.Errorf("workload identity tokens (iam): %w", errNotImplemented)
	case present(req.VolumeMounts):
		return fmt.Errorf("volume mounts: %w", errNotImplemented)
	case req.AutoResume != nil && req.AutoResume.Enabled:
		return fmt.Errorf("auto-resume on traffic (resume with Sandbox.connect): %w", errNotImplemented)
	case req.AutoPauseMemory != nil && *req.AutoPauseMemory:
		return fmt.Errorf("pausing with memory (pause keeps the files, not the processes): %w", errNotImplemented)
	}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	tpl, err := s.template(req.TemplateID)
	if err != nil {
		return err
	}
	timeout, err := timeoutOf(req.Timeout, defaultTimeout)
	if err != nil {
		return err
	}
	internet := req.AllowInternetAccess != nil && *req.AllowInternetAccess
	pol, err := s.policyFor(req.EnvVars, tpl, internet)
	if err != nil {
		return err
	}
	for k, v := range req.Metadata {
		if len(k) > 256 || len(v) > 4096 {
			return errdefs.Invalid("metadata %q: keys are at most 256 bytes, values 4096", k)
		}
	}
	if len(req.Metadata) > 64 {
		return errdefs.Invalid("metadata has %d keys, over 64", len(req.Metadata))
	}
	wreq := manager.CreateRequest{Empty: true, Task: "e2b sandbox (template " + req.TemplateID + ")"}
	if repo := req.Metadata[metaRepo]; repo != "" {
		wreq = manager.CreateRequest{Repo: repo, Ref: req.Metadata[metaRef], Task: wreq.Task}
	} else if req.Metadata[metaRef] != "" {
		return errdefs.Invalid("metadata %s names a ref but %s names no repo", metaRef, metaRepo)
	}
	spec := sandbox.Spec{Backend: tpl.Backend, Image: tpl.Image, Policy: &pol}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	ctx := r.Context()
	ws, err := s.m.CreateWorkspace(ctx, wreq)
	if err != nil {
		return err
	}
	undo := func() {
		if err := s.m.RemoveWorkspace(context.WithoutCancel(ctx), ws.ID); err != nil {
			s.log.Warn("e2b: removing the workspace of a sandbox that did not start", "workspace_id", ws.ID, "err", err)
		}
	}
	sb, err := s.m.CreateSandbox(ctx, ws.ID, spec)
	if err != nil {
		undo()
		return err
	}
	lim := sandbox.DefaultLimits
	if sb.Spec != "" {
		var got sandbox.Spec
		if json.Unmarshal([]byte(sb.Spec), &got) == nil {
			lim = got.WithDefaults().Limits
		}
	}
	now := time.Now().UTC()
	rec := record{
		ID: ws.ID, TemplateID: req.TemplateID, Metadata: req.Metadata, EnvdToken: newToken(), SpecJSON: specJSON,
		AllowInternet: internet, User: tpl.User, Home: tpl.Home, CPUs: max(1, int(lim.CPUs+0.5)), MemoryMB: int(lim.MemoryBytes >> 20),
		KeepWorkspace: wreq.Repo != "", AutoPause: req.AutoPause != nil && *req.AutoPause,
		State: stateRunning, StartedAt: now, EndAt: now.Add(timeout),
	}
	if err := s.reg.put(rec); err != nil {
		undo()
		return err
	}
	s.log.InfoContext(ctx, "e2b sandbox created", "workspace_id", ws.ID, "sandbox_id", sb.ID, "template", req.TemplateID)
	writeJSON(w, http.StatusCreated, rec.reply())
	return nil
}

// policyFor is the policy of an E2B sandbox: its env vars (and HOME, the
// template's home), and no network or the daemon's allowlist.
func (s *Server) policyFor(env map[string]string, tpl Template, internet bool) (policy.Policy, error) {
	doc := apitypes.Policy{Network: apitypes.PolicyNetwork{Mode: policy.ModeNone}, Env: map[string]string{"HOME": tpl.Home}}
	for k, v := range env {
		doc.Env[k] = v
	}
	if internet && len(s.opts.InternetAllow) > 0 {
		doc.Network = apitypes.PolicyNetwork{Mode: policy.ModeAllowlist, Allow: s.opts.InternetAllow}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return policy.Policy{}, err
	}
	p, err := policy.Parse(b)
	if err != nil {
		return policy.Policy{}, fmt.Errorf("envVars: %w", err)
	}
	return p, nil
}

// lookup returns the record of the path's sandbox, forgetting one whose
// workspace was removed through agentbox's own API.
func (s *Server) lookup(ctx context.Context, id string) (record, error) {
	rec, err := s.reg.get(id)
	if err != nil {
		return rec, err
	}
	if _, err := s.m.GetWorkspace(ctx, id); errors.Is(err, errdefs.ErrNotFound) {
		s.reg.remove(id)
		s.procs.forget(id)
		return record{}, fmt.Errorf("sandbox %s %w (its workspace was removed)", id, errdefs.ErrNotFound)
	}
	return rec, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, 200, rec.detail())
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			switch st {
			case stateRunning, statePaused:
				states[st] = true
			case "":
			default:
				return errdefs.Invalid("state %q is not running or paused", st)
			}
		}
	}
	limit := maxListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return errdefs.Invalid("limit %q is not a number in 1..%d", v, maxListLimit)
		}
		limit = n
	}
	skip := 0
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errdefs.Invalid("nextToken %q is not one this daemon handed out", v)
		}
		skip = n
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339, v); err != nil {
			return errdefs.Invalid("startedAfter %q is not an RFC 3339 time", v)
		}
	}
	template := q.Get("template")
	var match []sandboxDetail
	for _, rec := range s.reg.list() {
		if len(states) > 0 && !states[rec.State] {
			continue
		}
		if template != "" && rec.TemplateID != template {
			continue
		}
		if !after.IsZero() && !rec.StartedAt.After(after) {
			continue
		}
		ok := true
		for k, v := range want {
			if rec.Metadata[k] != v {
				ok = false
				break
			}
		}
		if ok {
			match = append(match, rec.detail())
		}
	}
	if q.Get("order") == "desc" {
		slices.Reverse(match)
	}
	if skip > len(match) {
		skip = len(match)
	}
	page := match[skip:]
	if len(page) > limit {
		page = page[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(skip+limit))
	}
	if page == nil {
		page = []sandboxDetail{}
	}
	writeJSON(w, 200, page)
	return nil
}

// metadataFilter reads the list's metadata query as the SDKs send it:
// key=value pairs joined by &, each key and value URL-encoded before the
// pairs are encoded as a query string (so, once the parameter itself is
// decoded, twice more).
func metadataFilter(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(v)
	if err != nil {
		return nil, errdefs.Invalid("metadata filter %q: %v", v, err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, errdefs.Invalid("metadata filter %q: a key or value is not URL-encoded", v)
		}
		out[key] = val
	}
	return out, nil
}

func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.reg.get(id); err != nil {
		return err
	}
	if err := s.kill(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// kill ends an E2B sandbox: its agentbox sandboxes stop, a scratch
// workspace is removed, a repo workspace stays (its changes are the
// result; `agentbox ws rm` removes it).
func (s *Server) kill(ctx context.Context, id string) error {
	rec, err := s.reg.get(id)
	if err != nil {
		return err
	}
	if rec.KeepWorkspace {
		if err := s.stopAll(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	} else if err := s.m.RemoveWorkspace(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("killing sandbox %s: %w", id, err)
	}
	s.procs.forget(id)
	if err := s.reg.remove(id); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "e2b sandbox killed", "workspace_id", id, "workspace_kept", rec.KeepWorkspace)
	return nil
}

// stopAll stops every running sandbox of workspace id.
func (s *Server) stopAll(ctx context.Context, id string) error {
	sbs, err := s.m.ListSandboxes(ctx, id)
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		if sb.State != string(sandbox.StateRunning) {
			continue
		}
		if _, err := s.m.StopSandbox(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("stopping sandbox %s of %s: %w", sb.ID, id, err)
		}
	}
	return nil
}

type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var req timeoutRequest
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Timeout == nil {
		return errdefs.Invalid("timeout is required (seconds)")
	}
	d, err := timeoutOf(req.Timeout, 0)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.lookup(r.Context(), id); err != nil {
		return err
	}
	if _, err := s.reg.update(id, func(rec *record) error {
		rec.EndAt = time.Now().UTC().Add(d)
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refresh is E2B's older keep-alive: extend by duration seconds.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	d, err := timeoutOf(req.Duration, 60*time.Second)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.lookup(r.Context(), id); err != nil {
		return err
	}
	if _, err := s.reg.update(id, func(rec *record) error {
		if end := time.Now().UTC().Add(d); end.After(rec.EndAt) {
			rec.EndAt = end
		}
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	if req.Memory != nil && *req.Memory {
		return fmt.Errorf("pausing with memory (pause keeps the files through the workspace, not the processes): %w", errNotImplemented)
	}
	id := r.PathValue("id")
	if _, err := s.lookup(r.Context(), id); err != nil {
		return err
	}
	if err := s.pause(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause stops the sandbox's execution environment; its files stay in the
// workspace, its processes end. A paused sandbox has no timeout.
func (s *Server) pause(ctx context.Context, id string) error {
	if _, err := s.reg.update(id, func(rec *record) error {
		if rec.State == statePaused {
			return fmt.Errorf("sandbox %s is already paused: %w", id, errdefs.ErrConflict)
		}
		rec.State = statePaused
		return nil
	}); err != nil {
		return err
	}
	if err := s.stopAll(ctx, id); err != nil {
		return err
	}
	s.procs.forget(id)
	s.log.InfoContext(ctx, "e2b sandbox paused", "workspace_id", id)
	return nil
}

func (s *Server) connectSandbox(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	d, err := timeoutOf(req.Timeout, 0)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	rec, err := s.lookup(r.Context(), id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if rec.State == statePaused {
		var spec sandbox.Spec
		if err := json.Unmarshal(rec.SpecJSON, &spec); err != nil {
			return fmt.Errorf("sandbox %s: reading its spec: %w", id, err)
		}
		if _, err := s.m.CreateSandbox(r.Context(), id, spec); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return fmt.Errorf("resuming sandbox %s: %w", id, err)
		}
		status = http.StatusCreated
		if req.Timeout == nil {
			d = defaultTimeout
		}
	}
	rec, err = s.reg.update(id, func(rec *record) error {
		end := time.Now().UTC().Add(d)
		if rec.State == statePaused || end.After(rec.EndAt) {
			rec.EndAt = end
		}
		rec.State = stateRunning
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, status, rec.reply())
	return nil
}

// metric is E2B's SandboxMetric.
type metric struct {
	Timestamp  time.Time `json:"timestamp"`
	CPUCount   int       `json:"cpuCount"`
	CPUUsedPct float64   `json:"cpuUsedPct"`
	MemUsed    int64     `json:"memUsed"`
	MemTotal   int64     `json:"memTotal"`
	MemCache   int64     `json:"memCache"`
	DiskUsed   int64     `json:"diskUsed"`
	DiskTotal  int64     `json:"diskTotal"`
}

// sandboxMetrics answers one sample: the sandbox's limits now. agentbox
// meters usage per exec and per sandbox (agentbox usage), not as a time
// series.
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, 200, []metric{{Timestamp: time.Now().UTC(), CPUCount: rec.CPUs, MemTotal: int64(rec.MemoryMB) << 20}})
	return nil
}

// expire ends a sandbox whose time is up: paused when it asked for
// autoPause, else killed.
func (s *Server) expire(id string) {
	if s.ctx.Err() != nil {
		return
	}
	rec, err := s.reg.get(id)
	if err != nil || rec.State != stateRunning {
		return
	}
	if time.Until(rec.EndAt) > 0 {
		// Extended after the timer fired: put re-armed it.
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	if rec.AutoPause {
		err = s.pause(ctx, id)
	} else {
		err = s.kill(ctx, id)
	}
	if err != nil {
		s.log.Warn("e2b: ending a sandbox at its timeout", "workspace_id", id, "err", err)
		return
	}
	s.log.Info("e2b sandbox timed out", "workspace_id", id, "paused", rec.AutoPause)
}
