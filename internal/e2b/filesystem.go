package e2b

import "net/http"

// registerFilesystem mounts envd's filesystem service and the /files
// endpoints (package envdfs, written apart). MERGE POINT: once
// internal/e2b/envdfs is in the tree this becomes
//
//	envdfs.Register(mux, s.m, func(r *http.Request) (envdfs.Target, error) {
//		t, err := s.resolveRequest(r)
//		return envdfs.Target{SandboxID: t.SandboxID, WorkspaceID: t.WorkspaceID, User: t.User, Home: t.Home}, err
//	})
//
// and the 501 fallback in envdMux for those paths goes.
func (s *Server) registerFilesystem(mux *http.ServeMux) {}
