package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/e2b/processpb/processpbconnect"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// target is the agentbox side of the E2B sandbox an envd request names.
// It carries the same fields as envdfs.Target.
type target struct {
	// ID is the E2B sandbox ID, which is WorkspaceID.
	ID string
	// SandboxID is the workspace's running agentbox sandbox, if any (a
	// command starts one when none runs).
	SandboxID   string
	WorkspaceID string
	// User and Home are the template's account and home.
	User, Home string
}

// resolve authenticates an envd request and names its sandbox: the
// E2b-Sandbox-Id header, the X-Access-Token the control API handed out
// for it, and the user the request asks for (HTTP Basic user, or the
// username query of /files), which must be the template's: sandboxes
// never run as root.
func (s *Server) resolve(ctx context.Context, h http.Header, username string) (target, error) {
	id := h.Get(headerSandboxID)
	rec, err := s.reg.get(id)
	if err != nil {
		return target{}, err
	}
	tok := h.Get(headerAccessToken)
	if tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(rec.EnvdToken)) != 1 {
		return target{}, fmt.Errorf("sandbox %s: missing or wrong access token (X-Access-Token is the envdAccessToken the control API answered): %w", id, errdefs.ErrUnauthorized)
	}
	if rec.State != stateRunning {
		return target{}, fmt.Errorf("sandbox %s is %s (Sandbox.connect resumes it): %w", id, rec.State, errdefs.ErrUnavailable)
	}
	if username == "" {
		username = basicUser(h.Get("Authorization"))
	}
	if err := checkUser(rec, username); err != nil {
		return target{}, err
	}
	return target{ID: id, WorkspaceID: id, User: rec.User, Home: rec.Home}, nil
}

// resolveRequest is resolve for an HTTP request (the envdfs Resolver),
// naming the workspace's running sandbox too.
func (s *Server) resolveRequest(r *http.Request) (target, error) {
	t, err := s.resolve(r.Context(), r.Header, r.URL.Query().Get("username"))
	if err != nil {
		return t, err
	}
	if sbs, err := s.m.ListSandboxes(r.Context(), t.WorkspaceID); err == nil {
		for _, sb := range sbs {
			if sb.State == string(sandbox.StateRunning) {
				t.SandboxID = sb.ID
			}
		}
	}
	return t, nil
}

// basicUser is the user of an "Authorization: Basic base64(user:)"
// header, as the SDK sends the user a command or file call asks for.
func basicUser(h string) string {
	b64, ok := strings.CutPrefix(h, "Basic ")
	if !ok {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "\x00invalid"
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return user
}

func checkUser(rec record, user string) error {
	switch user {
	case "", rec.User:
		return nil
	case "root":
		return fmt.Errorf("user root: agentbox sandboxes never run as root; commands and files run as %q: %w", rec.User, errdefs.ErrPolicyDenied)
	case "\x00invalid":
		return errdefs.Invalid("the Authorization header is not Basic base64(user:)")
	}
	return fmt.Errorf("user %q: this sandbox (template %s) runs everything as %q: %w", user, rec.TemplateID, rec.User, errdefs.ErrPolicyDenied)
}

// workdir is the working directory of a command: the home by default, a
// relative path under it. The home is the workspace (an image built for
// E2B links /home/user to /workspace), so E2B code finds its files there.
func (t target) workdir(cwd string) string {
	if cwd == "" {
		return t.Home
	}
	if !path.IsAbs(cwd) {
		cwd = path.Join(t.Home, cwd)
	}
	return path.Clean(cwd)
}

func (s *Server) envdMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	// A request is a small message; input is at most a stdin write (1 MiB)
	// in base64 JSON.
	path, h := processpbconnect.NewProcessHandler(&processService{s: s}, connect.WithReadMaxBytes(4<<20))
	mux.Handle(path, h)
	// The filesystem service and /files (package envdfs).
	s.registerFilesystem(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, fmt.Errorf("no envd route %s %s on agentbox: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return mux
}

// health answers envd's health check: 204 while the sandbox runs, 502
// (what the SDK reads as "not running") when it is unknown, killed or
// paused.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	_, err := s.resolve(r.Context(), r.Header, "")
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, errdefs.ErrUnauthorized):
		writeError(w, err)
	default:
		status := http.StatusBadGateway
		writeJSON(w, status, apiError{Code: status, Message: errdefs.Message(err)})
	}
}

// connectError turns an error into the Connect error the SDK maps to
// its own classes (NotFound -> NotFoundError, Unauthenticated ->
// AuthenticationError, InvalidArgument -> InvalidArgumentError, ...).
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch errdefs.Code(err) {
	case "not_found":
		code = connect.CodeNotFound
	case "invalid", "too_large":
		code = connect.CodeInvalidArgument
	case "conflict":
		code = connect.CodeFailedPrecondition
	case "policy_denied":
		code = connect.CodePermissionDenied
	case "unavailable":
		code = connect.CodeUnavailable
	case "unauthorized":
		code = connect.CodeUnauthenticated
	default:
		switch {
		case errors.Is(err, errNotImplemented):
			code = connect.CodeUnimplemented
		case errors.Is(err, context.DeadlineExceeded):
			code = connect.CodeDeadlineExceeded
		case errors.Is(err, context.Canceled):
			code = connect.CodeCanceled
		}
	}
	return connect.NewError(code, errors.New(errdefs.Message(err)))
}
