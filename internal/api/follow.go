package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// followKeepalive is how often a quiet event stream sends a keepalive (an
// SSE comment, or an empty NDJSON line that readers skip), so that a
// client that went away is noticed even when no event comes.
const followKeepalive = 15 * time.Second

// followers counts the open event streams (for tests: a stream whose
// client went away must end).
var followers atomic.Int64

// OpenEventStreams is the number of event streams being served.
func OpenEventStreams() int64 { return followers.Load() }

// followEvents streams the events f selects, those already logged after
// f.AfterID first, as NDJSON lines (one event each) or as SSE "event"
// events with the event ID as the SSE id, until the client goes away or
// the server shuts down.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, f store.EventFilter) {
	followers.Add(1)
	defer followers.Add(-1)
	sse := mediaType(r.Header.Get("Accept")) == sseType
	keepalive := []byte("\n")
	if sse {
		w.Header().Set("Content-Type", sseType)
		w.Header().Set("Cache-Control", "no-cache")
		keepalive = []byte(": keepalive\n\n")
	} else {
		w.Header().Set("Content-Type", ndjsonType)
	}
	err := s.stream(w, r, keepalive, func(ctx context.Context, send func([]byte) error) error {
		return s.m.FollowEvents(ctx, f, func(evs []store.Event) error {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			for _, e := range evs {
				if sse {
					buf.WriteString("id: ")
					buf.WriteString(strconv.FormatInt(e.ID, 10))
					buf.WriteString("\nevent: event\ndata: ")
					enc.Encode(e)
					buf.WriteString("\n")
				} else {
					enc.Encode(e)
				}
			}
			return send(buf.Bytes())
		})
	})
	if err != nil {
		s.log.WarnContext(r.Context(), "event stream failed", "err", err)
	}
}

// stream serves a response that produce writes through send, once the
// caller has set its headers: one writer, so that items and the
// keepalive sent every followKeepalive while it is quiet (so that a client
// that went away is noticed) never interleave. It ends when produce
// returns, when the client goes away, or when the server shuts down, and
// returns produce's error only when nothing of that ended it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, keepalive []byte, produce func(ctx context.Context, send func([]byte) error) error) error {
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	writes := make(chan []byte)
	errc := make(chan error, 1)
	go func() {
		errc <- produce(ctx, func(b []byte) error {
			select {
			case writes <- b:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	keep := time.NewTicker(followKeepalive)
	defer keep.Stop()
	for {
		var b []byte
		select {
		case b = <-writes:
		case <-keep.C:
			b = keepalive
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if _, err := w.Write(b); err != nil {
			cancel()
			<-errc
			return nil
		}
		flush()
	}
}
