package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/store"
)

// SecretRequest sets a secret's value. The value never comes back: no
// endpoint returns it, and the event log records only the name.
type SecretRequest struct {
	Value string `json:"value"`
}

func (s *Server) setSecret(w http.ResponseWriter, r *http.Request) {
	var req SecretRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("name")
	if err := s.m.SetSecret(r.Context(), name, []byte(req.Value)); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": name, "name": name, "set": true})
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.ListSecrets(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []store.SealedSecret{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"secrets": list})
}

func (s *Server) removeSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.m.RemoveSecret(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": name, "removed": true})
}
