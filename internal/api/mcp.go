package api

import (
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// mcp serves MCP's streamable HTTP transport (issue 12): the same tools as
// `agentbox mcp`, over the manager, on the listeners and behind the
// authentication of /v1.
func (s *Server) mcp(w http.ResponseWriter, r *http.Request) {
	if s.mcpHandler == nil {
		writeError(w, fmt.Errorf("this daemon serves no MCP endpoint: %w", errdefs.ErrNotFound))
		return
	}
	s.mcpHandler.ServeHTTP(w, r)
}
