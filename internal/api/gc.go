package api

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/manager"
)

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	var req apitypes.GCRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	rep, err := s.m.GC(r.Context(), manager.GCRequest{DryRun: req.DryRun, Budget: int64(req.Budget)}, time.Now())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, rep)
}
