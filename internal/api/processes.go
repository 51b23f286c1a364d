package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/manager"
)

// Background processes: /v1/workspaces/{id}/processes[/{pid}/...]. {id}
// is a workspace ID, or a sandbox ID standing for its workspace.

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ExecRequest
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.m.StartProcess(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) {
	ps, err := s.m.ListProcesses(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, apitypes.ProcessList{Processes: ps})
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) {
	p, err := s.m.GetProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, p)
}

// processLogs reads one stream (stream=stdout|stderr) from offset= (a
// negative one counts from the end), at most limit= bytes, as one
// ProcessLogs document; with follow=true it streams ProcessLogs lines
// (NDJSON) as the process writes, the last one carrying the ended process.
func (s *Server) processLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lq := manager.LogQuery{Stream: q.Get("stream")}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, errdefs.Invalid("logs: offset %q is not an integer", v))
			return
		}
		lq.Offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, errdefs.Invalid("logs: limit %q is not an integer", v))
			return
		}
		lq.Limit = n
	}
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	id, pid := r.PathValue("id"), r.PathValue("pid")
	if !follow {
		l, err := s.m.ProcessLogs(r.Context(), id, pid, lq)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, 200, l)
		return
	}
	// Refuse an unknown process or a bad query with a status, before the
	// stream starts.
	if _, err := s.m.ProcessLogs(r.Context(), id, pid, manager.LogQuery{Stream: lq.Stream, Limit: 1, Offset: -1}); err != nil {
		writeError(w, err)
		return
	}
	s.followLogs(w, r, id, pid, lq)
}

// followLogs streams a process's output as NDJSON, with an empty line
// every followKeepalive while it is quiet so that a client that went away
// is noticed. The process and the query were checked before the stream
// started: what can still end it early is its context, and the client
// then sees a stream without the last line, which carries the process.
func (s *Server) followLogs(w http.ResponseWriter, r *http.Request, id, pid string, lq manager.LogQuery) {
	w.Header().Set("Content-Type", ndjsonType)
	// The process ended (its last line is sent), or the client or the
	// server went away: the stream ends, and there is nobody to tell.
	s.stream(w, r, []byte("\n"), func(ctx context.Context, send func([]byte) error) error {
		return s.m.FollowProcessLogs(ctx, id, pid, lq, func(l apitypes.ProcessLogs) error {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(l)
			return send(buf.Bytes())
		})
	})
}

// processStdin takes up to manager.MaxStdinWrite bytes of input: the body
// may be six times that, for text that JSON escapes (\u0000).
func (s *Server) processStdin(w http.ResponseWriter, r *http.Request) {
	var in apitypes.ProcessStdin
	if err := decodeLimit(w, r, &in, 6*manager.MaxStdinWrite+4096); err != nil {
		writeError(w, err)
		return
	}
	res, err := s.m.WriteProcessStdin(r.Context(), r.PathValue("id"), r.PathValue("pid"), in)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, res)
}

func (s *Server) signalProcess(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ProcessSignal
	if err := decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.m.SignalProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, p)
}

func (s *Server) resizeProcess(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ProcessResize
	if err := decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.m.ResizeProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), req.Cols, req.Rows)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, p)
}

func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request) {
	var req apitypes.ProcessWait
	if err := decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	p, err := s.m.WaitProcess(r.Context(), r.PathValue("id"), r.PathValue("pid"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, p)
}

// decodeOptional decodes a JSON body as decode does, but takes an empty
// body as the zero value.
func decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.Invalid("request body over %d bytes", mbe.Limit)
		}
		return errdefs.Invalid("request body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return decode(w, r, v)
}

// decodeLimit is decode with a body limit of max bytes.
func decodeLimit(w http.ResponseWriter, r *http.Request, v any, max int64) error {
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errdefs.Invalid("request body is empty; a JSON object is required")
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body over %d bytes: %w", mbe.Limit, errdefs.ErrTooLarge)
		}
		return errdefs.Invalid("request body: %v", err)
	}
	if dec.More() {
		return errdefs.Invalid("request body has data after the JSON object")
	}
	return nil
}
