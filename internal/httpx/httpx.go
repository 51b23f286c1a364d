// Package httpx holds what the daemon's HTTP surfaces (the API and the E2B
// endpoint) share around their handlers.
package httpx

import "net/http"

// StatusRecorder remembers the status a handler wrote, for the request's
// log line; it passes flushes through (streams) and unwraps for
// http.ResponseController.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

// NewStatusRecorder wraps w; a handler that writes no header answered 200.
func NewStatusRecorder(w http.ResponseWriter) *StatusRecorder {
	return &StatusRecorder{ResponseWriter: w, Status: http.StatusOK}
}

func (r *StatusRecorder) WriteHeader(code int) {
	r.Status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *StatusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *StatusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
