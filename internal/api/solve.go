package api

import (
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (s *Server) solverOr503(w http.ResponseWriter) bool {
	if s.solver == nil {
		writeError(w, fmt.Errorf("this daemon runs no agent loop: %w", errdefs.ErrUnavailable))
		return false
	}
	return true
}

func (s *Server) startSolve(w http.ResponseWriter, r *http.Request) {
	if !s.solverOr503(w) {
		return
	}
	var req apitypes.SolveRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	run, err := s.solver.Start(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, run)
}

func (s *Server) listSolve(w http.ResponseWriter, r *http.Request) {
	if !s.solverOr503(w) {
		return
	}
	runs, err := s.solver.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.SolveRunList{Runs: runs})
}

func (s *Server) getSolve(w http.ResponseWriter, r *http.Request) {
	if !s.solverOr503(w) {
		return
	}
	run, err := s.solver.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, run)
}

func (s *Server) solveSteps(w http.ResponseWriter, r *http.Request) {
	if !s.solverOr503(w) {
		return
	}
	steps, err := s.solver.Steps(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.SolveStepList{Steps: steps})
}

func (s *Server) cancelSolve(w http.ResponseWriter, r *http.Request) {
	if !s.solverOr503(w) {
		return
	}
	run, err := s.solver.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, run)
}
