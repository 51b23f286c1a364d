package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
)

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	ns, err := s.m.ListNodes(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.NodeList{Nodes: ns})
}
