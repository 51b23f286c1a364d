package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
)

func (s *Server) addDependency(w http.ResponseWriter, r *http.Request) {
	var req apitypes.DependencyRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	dep, err := s.m.AddDependency(r.Context(), r.PathValue("id"), req.Spec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, dep)
}
