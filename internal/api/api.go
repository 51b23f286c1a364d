// Package api serves agentbox's HTTP/JSON API under /v1. It is the one
// place where error classes become status codes (writeError), and its route
// table (routes.go) is the single list of routes: the mux serves exactly
// its entries, and openapi.json is generated from it and the apitypes
// types (package openapigen).
package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/httpx"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/manager"
)

// Version is the daemon version reported by /v1/health.
var Version = "dev"

// Options configures a Server.
type Options struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN".
	Token  string
	Logger *slog.Logger
	// Metrics, if set, serves GET /metrics (telemetry.Metrics.Handler);
	// nil answers 404.
	Metrics http.Handler
	// MCP, if set, serves MCP's streamable HTTP transport at /mcp
	// (mcpserver.HTTPHandler), behind the same authentication as /v1;
	// nil answers 404.
	MCP http.Handler
	// Solver, if set, runs the agent loop behind /v1/solve; nil answers
	// 503.
	Solver Solver
	// NodeKey, when set, is the key the nodes sharing the store sign
	// forwarded requests with (see forward.go): requests about another
	// node's objects are forwarded to it, and requests it forwards are
	// taken. Empty: every request is served here.
	NodeKey []byte
}

// Solver is the agent loop's runner (solve.Runner), owned by the daemon.
type Solver interface {
	Start(ctx context.Context, req apitypes.SolveRequest) (apitypes.SolveRun, error)
	Get(ctx context.Context, id string) (apitypes.SolveRun, error)
	List(ctx context.Context) ([]apitypes.SolveRun, error)
	Steps(ctx context.Context, id string) ([]apitypes.SolveStep, error)
	Cancel(ctx context.Context, id string) (apitypes.SolveRun, error)
}

// Server is the API handler.
type Server struct {
	m     *manager.Manager
	token string
	log   *slog.Logger
	mux   *http.ServeMux
	// metricsHandler serves GET /metrics; nil: none.
	metricsHandler http.Handler
	// mcpHandler serves /mcp; nil: none.
	mcpHandler http.Handler
	solver     Solver
	// closing is closed by Shutdown: streams that would never end on
	// their own (event follows) end then.
	closing     chan struct{}
	closingOnce sync.Once
	// fwd forwards requests to other nodes; nil: none.
	fwd *forwarder
}

// New returns the API handler over m.
func New(m *manager.Manager, opts Options) *Server {
	s := &Server{m: m, token: opts.Token, log: opts.Logger, mux: http.NewServeMux(), metricsHandler: opts.Metrics, mcpHandler: opts.MCP, solver: opts.Solver, closing: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if len(opts.NodeKey) > 0 && m.NodeID() != "" {
		s.fwd = &forwarder{self: m.NodeID(), key: opts.NodeKey}
	}
	for _, r := range routes {
		s.mux.HandleFunc(r.method+" "+r.path, s.routed(r.method, r.path, r.handler))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("no API route %s %s: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return s
}

// ServeHTTP authenticates, logs and dispatches a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Header.Get(hdrSig) != "" {
		// Another node vouches for the caller (see forward.go).
		if _, err := s.fwd.verify(r, time.Now()); err != nil {
			writeError(w, fmt.Errorf("%v: %w", err, errdefs.ErrUnauthorized))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), forwardedKey, true))
	} else if s.token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			writeError(w, fmt.Errorf("missing or wrong bearer token: %w", errdefs.ErrUnauthorized))
			return
		}
	}
	reqID := ids.New("req")
	if v := r.Header.Get("X-Request-Id"); forwarded(r) && ids.HasPrefix(v, "req") && len(v) <= 64 {
		// One request, one ID, in the logs and events of both nodes.
		reqID = v
	}
	w.Header().Set("X-Request-Id", reqID)
	ctx, scope := logx.NewScope(r.Context(), slog.String(logx.KeyRequest, reqID))
	rec := httpx.NewStatusRecorder(w)
	s.mux.ServeHTTP(rec, r.WithContext(ctx))
	// The request's line names the objects it touched, as far as it
	// learned them (the path's ID, the sandbox and exec it ran in).
	attrs := scope.Attrs()
	args := make([]any, 0, 4+len(attrs))
	for _, a := range attrs {
		args = append(args, a)
	}
	args = append(args, "method", r.Method, "path", r.URL.Path, "status", rec.Status, "duration", time.Since(start))
	level := slog.LevelInfo
	if (r.URL.Path == "/metrics" || r.URL.Path == "/v1/health") && rec.Status < 400 {
		level = slog.LevelDebug // probes and scrapes, every few seconds
	}
	s.log.Log(context.Background(), level, "request", args...)
}

// Shutdown ends the streams that would not end on their own (event
// follows), so that a graceful shutdown need not wait for their clients.
// The daemon registers it with http.Server.RegisterOnShutdown.
func (s *Server) Shutdown() { s.closingOnce.Do(func() { close(s.closing) }) }

// withPathIDs notes the object a request's path names (its {id}) in the
// request's log context.
func withPathIDs(r *http.Request) *http.Request {
	id := r.PathValue("id")
	key := ""
	switch {
	case id == "":
		return r
	case ids.HasPrefix(id, "ws"):
		key = logx.KeyWorkspace
	case ids.HasPrefix(id, "sb"):
		key = logx.KeySandbox
	case ids.HasPrefix(id, "repo"):
		key = logx.KeyRepo
	default:
		return r
	}
	return r.WithContext(logx.With(r.Context(), key, id))
}

// ErrorBody is the JSON of every error response.
type ErrorBody = apitypes.ErrorReply

// StatusOf maps an error class to its HTTP status.
func StatusOf(err error) int {
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
	return http.StatusInternalServerError
}

// ErrorOf is the error body of err, as the API would send it: its code
// and its message without the trailing class word.
func ErrorOf(err error) ErrorBody { return errorBody(err) }

func errorBody(err error) ErrorBody { return ErrorBody{Error: *errorDetail(err)} }

// errorDetail is the error part of err's body, as streams send it.
func errorDetail(err error) *apitypes.ErrorDetail {
	return &apitypes.ErrorDetail{Code: errdefs.Code(err), Message: errMessage(err)}
}

// errMessage drops the trailing class word that wrapping appends
// ("workspace ws_1 not found" rather than "...: not found").
func errMessage(err error) string { return errdefs.Message(err) }

func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, StatusOf(err), errorBody(err))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// decode reads a JSON body of at most 1 MiB, refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errdefs.Invalid("request body is empty; a JSON object is required")
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body over %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
		}
		return errdefs.Invalid("request body: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("request body has data after the JSON object")
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, apitypes.Health{Status: "ok", Version: Version, WorkspaceDriver: s.m.Driver()})
}
