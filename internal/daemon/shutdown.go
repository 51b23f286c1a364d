package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/manager"
)

// These bound the steps of a shutdown once the grace period is over: the
// ends of cancelled requests, stopping the sandboxes, and the ends of the
// requests left after that.
const (
	cancelledEndTimeout  = 5 * time.Second
	stopSandboxesTimeout = time.Minute
	handlersEndTimeout   = 15 * time.Second
)

// inflight counts the requests being handled, including those whose
// connection was taken over (shell sessions on a WebSocket), which
// http.Server.Shutdown does not wait for.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newInflight() *inflight {
	f := &inflight{idle: make(chan struct{})}
	close(f.idle)
	return f
}

func (f *inflight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if f.n == 0 {
			f.idle = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.idle)
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// wait waits until no request is being handled or ctx ends.
func (f *inflight) wait(ctx context.Context) bool {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// shutdown stops srvs (the API's, and the E2B endpoint's) gracefully: it stops accepting at once, lets the
// requests running (shell sessions too) finish within grace, then ends
// what is left (cancelRequests cancels every request's context, so a
// running command is killed and recorded as such), stops every sandbox
// (which ends shell sessions, whose context is their connection's) and
// waits, bounded, for the handlers to return, so that nothing writes to
// the state after the daemon closes it.
func shutdown(srvs []*http.Server, reqs *inflight, cancelRequests context.CancelFunc, m *manager.Manager, grace time.Duration, log *slog.Logger) {
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var err error
	for _, srv := range srvs {
		if serr := srv.Shutdown(gctx); serr != nil && err == nil {
			err = serr
		}
	}
	if err == nil && !reqs.wait(gctx) {
		err = gctx.Err()
	}
	if err != nil {
		log.Warn("requests still running at the end of the grace period: ending them", "grace", grace, "err", err)
	}
	// Cancelled, a command is killed and a shell session closed, each
	// recorded as killed; a moment for that before the sandboxes go
	// (which would end them as lost).
	cancelRequests()
	cctx, ccancel := context.WithTimeout(context.Background(), cancelledEndTimeout)
	defer ccancel()
	reqs.wait(cctx)
	sctx, scancel := context.WithTimeout(context.Background(), stopSandboxesTimeout)
	defer scancel()
	if err := m.Shutdown(sctx); err != nil {
		log.Warn("stopping sandboxes", "err", err)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), handlersEndTimeout)
	defer hcancel()
	if !reqs.wait(hctx) {
		log.Warn("requests still running after their sandboxes stopped", "waited", handlersEndTimeout)
	}
	// A sandbox a late request started meanwhile stops too.
	if err := m.Shutdown(sctx); err != nil {
		log.Warn("stopping sandboxes", "err", err)
	}
	for _, srv := range srvs {
		srv.Close()
	}
}
