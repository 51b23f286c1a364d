package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
)

// Live execs: /v1/workspaces/{id}/execs lists (or follows) a workspace's
// ordinary execs as they start and end, /v1/execs/{id}/output reads (or
// follows) one's output from the daemon's rings, for any client, not only
// the one whose request runs it.

func (s *Server) listLiveExecs(w http.ResponseWriter, r *http.Request) {
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	list, err := s.m.ListLiveExecs(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if !follow {
		writeJSON(w, 200, apitypes.LiveExecList{Execs: list})
		return
	}
	w.Header().Set("Content-Type", ndjsonType)
	s.stream(w, r, []byte("\n"), func(ctx context.Context, send func([]byte) error) error {
		return s.m.FollowLiveExecs(ctx, id, func(e apitypes.LiveExec) error { return send(ndjsonLine(e)) })
	})
}

// liveExecOutput reads one stream of a live exec as processLogs reads a
// process's; with follow=true it streams until the exec ends, the last
// line carrying the ended exec.
func (s *Server) liveExecOutput(w http.ResponseWriter, r *http.Request) {
	lq, follow, err := logQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	l, err := s.m.LiveExecOutput(r.Context(), id, lq)
	if err != nil {
		writeError(w, err)
		return
	}
	if !follow {
		writeJSON(w, 200, l)
		return
	}
	w.Header().Set("Content-Type", ndjsonType)
	s.stream(w, r, []byte("\n"), func(ctx context.Context, send func([]byte) error) error {
		return s.m.FollowLiveExecOutput(ctx, id, lq, func(l apitypes.ProcessLogs) error { return send(ndjsonLine(l)) })
	})
}

// logQuery reads the stream, offset, limit and follow parameters of a
// read of output.
func logQuery(r *http.Request) (manager.LogQuery, bool, error) {
	q := r.URL.Query()
	lq := manager.LogQuery{Stream: q.Get("stream")}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return lq, false, errdefs.Invalid("output: offset %q is not an integer", v)
		}
		lq.Offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return lq, false, errdefs.Invalid("output: limit %q is not an integer", v)
		}
		lq.Limit = n
	}
	follow, err := boolParam(r, "follow")
	return lq, follow, err
}

// ndjsonLine is v as one NDJSON line, with <, > and & as they are.
func ndjsonLine(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return buf.Bytes()
}
