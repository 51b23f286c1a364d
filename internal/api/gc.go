package api

import (
	"net/http"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
)

// GCRequest asks for one disk collection. An empty body is a real run
// under the daemon's configured budget.
type GCRequest struct {
	// DryRun lists what would go and removes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Budget, a size like "10G" or a number of bytes, replaces the
	// daemon's data_budget for this run.
	Budget policy.ByteSize `json:"budget,omitempty"`
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) {
	var req GCRequest
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
