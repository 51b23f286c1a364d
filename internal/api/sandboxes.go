package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
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
	// Policy is the sandbox's policy document, read strictly by
	// policy.Parse (unknown fields are errors); none means no network.
	Policy json.RawMessage `json:"policy,omitempty"`
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
