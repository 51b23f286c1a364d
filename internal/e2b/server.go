// Package e2b serves E2B's public API over agentbox's manager, so that
// the official E2B SDKs work unchanged against a self-hosted daemon with
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set. One listener carries
// both of E2B's surfaces: the control API (create, list, get, kill, set
// timeout, pause, connect; X-API-Key is the daemon's token) and the
// in-sandbox daemon's API ("envd": the Connect process and filesystem
// services and the /files endpoints), which the SDK sends to
// E2B_SANDBOX_URL naming the sandbox in the E2b-Sandbox-Id header and
// authenticating with the access token the control API handed out.
//
// An E2B sandbox is an agentbox workspace with a sandbox on it; its ID is
// the workspace's, so its results can be diffed, committed and reviewed
// through agentbox's own API. Like /v1 and MCP this package is a thin
// adapter: decode, call the manager, encode.
package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/httpx"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/manager"
)

// EnvdVersion is the envd version agentbox says it speaks. The SDK turns
// features on by it (0.4.0: no default user header; 0.5.2: closeStdin;
// 0.5.7: uploads as application/octet-stream); features of later envd
// versions (file metadata, watch events with entries) it refuses itself
// with a clear TemplateError.
const EnvdVersion = "0.5.7"

// Template is what an E2B template ID stands for (config.E2BTemplate).
type Template struct {
	Image, Backend, User, Home string
}

// Options configures a Server.
type Options struct {
	// Token is the daemon's API token: the E2B API key (X-API-Key).
	Token string
	// DataDir is the daemon's data dir; the E2B records live in
	// DataDir/e2b/sandboxes.
	DataDir string
	// Templates maps template IDs to images; "base" defaults to the
	// daemon's default image.
	Templates map[string]Template
	// InternetAllow is the allowlist a sandbox created with
	// allow_internet_access gets.
	InternetAllow []string
	Logger        *slog.Logger
}

// Server serves the E2B endpoint.
type Server struct {
	m     *manager.Manager
	opts  Options
	log   *slog.Logger
	reg   *registry
	procs *procTable
	// control and envd are the two surfaces' muxes.
	control *http.ServeMux
	envd    *http.ServeMux
	// ctx ends with Close: expirations that run after it do nothing.
	ctx    context.Context
	cancel context.CancelFunc
}

// New returns the E2B endpoint over m. It loads the sandboxes it handed
// out before and arms their timeouts.
func New(m *manager.Manager, opts Options) (*Server, error) {
	if opts.Token == "" {
		return nil, errdefs.Invalid("e2b endpoint: no token (it is the E2B API key)")
	}
	s := &Server{m: m, opts: opts, log: opts.Logger, procs: newProcTable()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	reg, err := newRegistry(filepath.Join(opts.DataDir, "e2b", "sandboxes"))
	if err != nil {
		return nil, err
	}
	s.reg = reg
	s.control = s.controlMux()
	s.envd = s.envdMux()
	reg.start(s.expire)
	return s, nil
}

// Close stops the timers. The sandboxes stay; a restarted daemon takes
// them up again.
func (s *Server) Close() {
	s.cancel()
	s.reg.close()
}

// ServeHTTP sends a request to envd when it names a sandbox (the SDK sets
// E2b-Sandbox-Id on every envd call when E2B_SANDBOX_URL is set), else to
// the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := httpx.NewStatusRecorder(w)
	surface := "control"
	if r.Header.Get(headerSandboxID) != "" {
		surface = "envd"
		s.envd.ServeHTTP(rec, r)
	} else {
		s.control.ServeHTTP(rec, r)
	}
	level := slog.LevelInfo
	if r.URL.Path == "/health" && rec.Status < 400 {
		level = slog.LevelDebug
	}
	s.log.Log(r.Context(), level, "e2b request", "surface", surface, "method", r.Method, "path", r.URL.Path,
		logx.KeyWorkspace, r.Header.Get(headerSandboxID), "status", rec.Status, "duration", time.Since(start))
}

const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerAccessToken = "X-Access-Token"
	headerAPIKey      = "X-API-Key"
)

// authorized checks the control API's key against the daemon's token.
func (s *Server) authorized(r *http.Request) error {
	got := r.Header.Get(headerAPIKey)
	if got == "" {
		if bearer, ok := cutBearer(r.Header.Get("Authorization")); ok {
			got = bearer
		}
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) != 1 {
		return fmt.Errorf("missing or wrong API key (X-API-Key is the agentbox daemon's token; `agentbox e2b env` prints it): %w", errdefs.ErrUnauthorized)
	}
	return nil
}

func cutBearer(h string) (string, bool) {
	const p = "Bearer "
	if len(h) > len(p) && h[:len(p)] == p {
		return h[len(p):], true
	}
	return "", false
}

// apiError is the control API's error body, as E2B's SDKs read it: code
// is the HTTP status.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// statusOf maps an error class to the status E2B's API answers with.
func statusOf(err error) int {
	switch errdefs.Code(err) {
	case "not_found":
		return http.StatusNotFound
	case "conflict":
		return http.StatusConflict
	case "invalid":
		return http.StatusBadRequest
	case "policy_denied":
		return http.StatusForbidden
	case "unavailable":
		return http.StatusServiceUnavailable
	case "too_large":
		return http.StatusRequestEntityTooLarge
	case "unauthorized":
		return http.StatusUnauthorized
	}
	if errors.Is(err, errNotImplemented) {
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// errNotImplemented marks an E2B feature agentbox does not offer.
var errNotImplemented = errors.New("not implemented by agentbox")

func writeError(w http.ResponseWriter, err error) {
	status := statusOf(err)
	writeJSON(w, status, apiError{Code: status, Message: errdefs.Message(err)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}
