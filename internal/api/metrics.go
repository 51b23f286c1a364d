package api

import (
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// metrics serves the daemon's Prometheus metrics. It sits behind the same
// authentication as every route: the numbers name backends and reveal
// activity, which is nobody else's business on a shared host.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.metricsHandler == nil {
		writeError(w, fmt.Errorf("this daemon serves no metrics: %w", errdefs.ErrNotFound))
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}
