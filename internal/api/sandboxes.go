package api

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// SandboxRequest asks for a sandbox on a workspace; its policy is read
// strictly by policy.Parse.
type SandboxRequest = apitypes.SandboxRequest

// sandboxView is the API's sandbox: the record without what only the
// daemon keeps (the guest's token hash).
func sandboxView(sb store.Sandbox) apitypes.Sandbox {
	return apitypes.Sandbox{
		ID: sb.ID, WorkspaceID: sb.WorkspaceID, Backend: sb.Backend, BackendRef: sb.BackendRef,
		Image: sb.Image, Spec: sb.Spec, State: sb.State, Replaces: sb.Replaces, Node: sb.Node,
		CreatedAt: sb.CreatedAt, UpdatedAt: sb.UpdatedAt, LastActivityAt: sb.LastActivityAt,
	}
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req SandboxRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	spec := sandbox.Spec{Backend: req.Backend, Image: req.Image, Limits: sandbox.Limits(req.Limits)}
	if req.Lifetime != "" {
		d, err := time.ParseDuration(req.Lifetime)
		if err != nil {
			writeError(w, errdefs.Invalid("lifetime %q is not a duration like 2h", req.Lifetime))
			return
		}
		spec.Lifetime = d
	}
	if len(req.Policy) > 0 && string(req.Policy) != "null" {
		p, err := policy.Parse(req.Policy)
		if err != nil {
			writeError(w, err)
			return
		}
		spec.Policy = &p
	}
	sb, err := s.m.CreateSandbox(r.Context(), req.Workspace, spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxView(sb))
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	sbs, err := s.m.ListSandboxes(r.Context(), r.URL.Query().Get("workspace"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]apitypes.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, sandboxView(sb))
	}
	writeJSON(w, 200, apitypes.SandboxList{Sandboxes: out})
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.GetSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, sandboxView(sb))
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.m.StopSandbox(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, sandboxView(sb))
}

func (s *Server) removeSandbox(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.m.RemoveSandbox(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.Removed{ID: id, Removed: true})
}
