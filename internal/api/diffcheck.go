package api

import (
	"encoding/json"
	"net/http"

	"github.com/agentbox/agentbox/internal/diffcheck"
	"github.com/agentbox/agentbox/internal/policy"
)

// DiffCheckRequest is the optional body of a diff check.
type DiffCheckRequest struct {
	// Policy is a policy document whose writable paths the result is
	// checked against, read strictly by policy.Parse; none means the
	// policy of the workspace's most recent sandbox.
	Policy json.RawMessage `json:"policy,omitempty"`
}

// DiffReport is a diff check's answer: the workspace and the report's
// fields.
type DiffReport struct {
	ID string `json:"id"`
	diffcheck.Report
}

func (s *Server) checkDiff(w http.ResponseWriter, r *http.Request) {
	var req DiffCheckRequest
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
	writeJSON(w, http.StatusOK, DiffReport{ID: id, Report: rep})
}
