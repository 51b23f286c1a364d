package e2b

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/e2b/envdfs"
)

// registerFilesystem mounts envd's filesystem service and the /files
// endpoints (package envdfs) with this server's resolver: the same token
// check and sandbox lookup as the process service, so a killed or paused
// sandbox's calls fail and its watches end.
func (s *Server) registerFilesystem(mux *http.ServeMux) {
	envdfs.Register(mux, s.m, func(r *http.Request) (envdfs.Target, error) {
		t, err := s.resolveRequest(r)
		return envdfs.Target{SandboxID: t.SandboxID, WorkspaceID: t.WorkspaceID, User: t.User, Home: t.Home}, err
	})
}
