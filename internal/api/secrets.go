package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// SecretRequest sets a secret's value. The value never comes back: no
// endpoint returns it, and the event log records only the name.
type SecretRequest = apitypes.SecretRequest

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
	writeJSON(w, http.StatusOK, apitypes.SecretSet{ID: name, Name: name, Set: true})
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.ListSecrets(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]apitypes.SecretInfo, 0, len(list))
	for _, s := range list {
		out = append(out, apitypes.SecretInfo{Name: s.Name, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt})
	}
	writeJSON(w, http.StatusOK, apitypes.SecretList{Secrets: out})
}

func (s *Server) removeSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.m.RemoveSecret(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.Removed{ID: name, Removed: true})
}
