package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (s *Server) review(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ReviewRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	c, err := s.m.Review(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

func (s *Server) listCandidates(w http.ResponseWriter, r *http.Request) {
	cs, err := s.m.ListCandidates(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.CandidateList{Candidates: cs})
}

func (s *Server) getCandidate(w http.ResponseWriter, r *http.Request) {
	c, err := s.m.GetCandidate(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, c)
}

func (s *Server) approveCandidate(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, apitypes.DispositionApproved)
}

func (s *Server) rejectCandidate(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, apitypes.DispositionRejected)
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, disposition string) {
	var req apitypes.DecisionRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	c, err := s.m.Decide(r.Context(), r.PathValue("id"), disposition, req.Actor, req.Reason)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, c)
}

func (s *Server) push(w http.ResponseWriter, r *http.Request) {
	c, err := s.m.Push(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, c)
}

func (s *Server) listForges(w http.ResponseWriter, r *http.Request) {
	fs, err := s.m.ListForges(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.ForgeList{Forges: fs})
}

func (s *Server) setForge(w http.ResponseWriter, r *http.Request) {
	var f apitypes.ForgeBinding
	if err := decode(w, r, &f); err != nil {
		writeError(w, err)
		return
	}
	if f.Host != "" && f.Host != r.PathValue("host") {
		writeError(w, errdefs.Invalid("forge host %q in the body is not the path's %q", f.Host, r.PathValue("host")))
		return
	}
	f.Host = r.PathValue("host")
	out, err := s.m.SetForge(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, out)
}

func (s *Server) removeForge(w http.ResponseWriter, r *http.Request) {
	host := r.PathValue("host")
	if err := s.m.RemoveForge(r.Context(), host); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.Removed{ID: host, Removed: true})
}
