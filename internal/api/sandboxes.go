package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// SandboxRequest asks for a sandbox on a workspace.
type SandboxRequest struct {
	Workspace string         `json:"workspace"`
	Backend   string         `json:"backend,omitempty"`
	Image     string         `json:"image,omitempty"`
	Limits    sandbox.Limits `json:"limits,omitempty"`
	// Lifetime is a Go duration ("2h"); empty means none.
	Lifetime string `json:"lifetime,omitempty"`
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req SandboxRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	spec := sandbox.Spec{Backend: req.Backend, Image: req.Image, Limits: req.Limits}
	if req.Lifetime != "" {
		d, err := time.ParseDuration(req.Lifetime)
		if err != nil {
			writeError(w, errdefs.Invalid("lifetime %q is not a duration like 2h", req.Lifetime))
			return
		}
		spec.Lifetime = d
	}
	sb, err := s.m.CreateSandbox(r.Context(), req.Workspace, spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sb)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	sbs, err := s.m.ListSandboxes(r.Context(), r.URL.Query().Get("workspace"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, map[string]any{"sandboxes": sbs})
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, sb)
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.StopSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, sb)
}

func (s *Server) removeSandbox(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.m.RemoveSandbox(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, map[string]any{"id": id, "removed": true})
}

// ExecRequest is a command to run. Output streams back as NDJSON lines
// {"stream":"stdout"|"stderr","data":"..."} (or "data_b64" for bytes that
// are not UTF-8), then one {"result": {...}} line.
type ExecRequest struct {
	Argv []string `json:"argv"`
	// Env is the command's whole environment as KEY=VALUE entries.
	Env []string `json:"env,omitempty"`
	// Workdir defaults to /workspace.
	Workdir string `json:"workdir,omitempty"`
	// Timeout is a Go duration ("30s"); empty means none.
	Timeout string `json:"timeout,omitempty"`
	// MaxOutputBytes caps stdout and stderr each.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
	// Stdin is fed to the command (at most 16 MiB).
	Stdin string `json:"stdin,omitempty"`
}

// ExecLine is one line of an exec's NDJSON stream.
type ExecLine struct {
	Stream  string `json:"stream,omitempty"`
	Data    string `json:"data,omitempty"`
	DataB64 string `json:"data_b64,omitempty"`
	Result  any    `json:"result,omitempty"`
	Error   any    `json:"error,omitempty"`
}

// streamWriter turns one output stream into NDJSON lines.
type streamWriter struct {
	mu     *sync.Mutex
	enc    *json.Encoder
	flush  func()
	stream string
}

func (sw *streamWriter) Write(b []byte) (int, error) {
	line := ExecLine{Stream: sw.stream}
	if utf8.Valid(b) {
		line.Data = string(b)
	} else {
		line.DataB64 = base64.StdEncoding.EncodeToString(b)
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if err := sw.enc.Encode(line); err != nil {
		return 0, err
	}
	sw.flush()
	return len(b), nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	r.Body = http.MaxBytesReader(w, r.Body, 17<<20)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, errdefs.Invalid("exec request: %v", err))
		return
	}
	if len(req.Argv) == 0 {
		writeError(w, errdefs.Invalid("exec request: argv is empty"))
		return
	}
	if len(req.Stdin) > 16<<20 {
		writeError(w, errdefs.Invalid("exec request: stdin over 16 MiB"))
		return
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			writeError(w, errdefs.Invalid("exec request: env entry %q is not KEY=VALUE", kv))
			return
		}
	}
	greq := guest.ExecRequest{Argv: req.Argv, Env: req.Env, Dir: req.Workdir, MaxOutputBytes: req.MaxOutputBytes}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			writeError(w, errdefs.Invalid("exec request: timeout %q is not a positive duration like 30s", req.Timeout))
			return
		}
		greq.Timeout = d
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	stdout := &streamWriter{mu: &mu, enc: enc, flush: flush, stream: "stdout"}
	stderr := &streamWriter{mu: &mu, enc: enc, flush: flush, stream: "stderr"}
	out, err := s.m.Exec(r.Context(), r.PathValue("id"), greq, strings.NewReader(req.Stdin), stdout, stderr)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		enc.Encode(ExecLine{Error: errorBody(err).Error})
		return
	}
	enc.Encode(ExecLine{Result: ExecResult{
		ExecID: out.ExecID, SandboxID: out.SandboxID, Replaced: out.Replaced,
		ExitCode: out.ExitCode, Signal: out.Signal, TimedOut: out.TimedOut, Canceled: out.Canceled, Lost: out.Lost,
		StdoutTruncated: out.StdoutTruncated, StderrTruncated: out.StderrTruncated,
		StdoutBytes: out.StdoutBytes, StderrBytes: out.StderrBytes, DurationMS: out.Duration.Milliseconds(),
	}})
}

// ExecResult is the last line of an exec stream.
type ExecResult struct {
	ExecID          string `json:"exec_id"`
	SandboxID       string `json:"sandbox_id"`
	Replaced        bool   `json:"replaced"`
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out"`
	Canceled        bool   `json:"canceled,omitempty"`
	Lost            bool   `json:"lost"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	DurationMS      int64  `json:"duration_ms"`
}
