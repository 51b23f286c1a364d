package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/policy"
)

func (s *Server) checkDiff(w http.ResponseWriter, r *http.Request) {
	var req apitypes.DiffCheckRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	var pol *policy.Policy
	if len(req.Policy) > 0 && string(req.Policy) != "null" {
		p, err := policy.Parse(req.Policy)
		if err != nil {
			writeError(w, err)
			return
		}
		pol = &p
	}
	id := r.PathValue("id")
	rep, err := s.m.CheckDiff(r.Context(), id, pol)
	if err != nil {
		writeError(w, err)
		return
	}
	// 200 whether or not the check found anything: the report says.
	rep.ID = id
	writeJSON(w, http.StatusOK, rep)
}
