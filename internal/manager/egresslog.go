package manager

import (
	"context"
	"sync"

	"github.com/agentbox/agentbox/internal/store"
)

// Egress decisions come one per proxied connection, at the end of it, from
// the proxy's goroutines. Writing each in its own commit (an fsync) there
// puts a commit per connection on the proxy's path and makes a burst of
// short connections wait on the disk. Instead RecordEgress queues the
// decision, with everything it needs already looked up, and one writer
// records what has queued up in one transaction. Nothing is dropped: a
// full queue makes the proxy wait, and a sandbox's egress socket is not
// closed (stop, removal, shutdown) before the decisions it produced are
// committed.
const (
	// egressBatchMax caps the decisions of one transaction.
	egressBatchMax = 512
	// egressQueueMax is how many decisions may wait before RecordEgress
	// blocks until the writer catches up.
	egressQueueMax = 8192
)

// egressLog is the queue of decisions not yet recorded and its writer.
type egressLog struct {
	mu      sync.Mutex
	changed *sync.Cond // pending shrank, or the writer went idle
	pending []store.EgressRecord
	writing bool // the writer holds a batch taken from pending
	started bool
	wake    chan struct{}
}

// enqueueEgress queues rec for the writer, which it starts on first use.
func (m *Manager) enqueueEgress(rec store.EgressRecord) {
	l := &m.egressLog
	l.mu.Lock()
	if !l.started {
		l.started = true
		l.changed = sync.NewCond(&l.mu)
		l.wake = make(chan struct{}, 1)
		go m.writeEgress()
	}
	for len(l.pending) >= egressQueueMax {
		l.changed.Wait()
	}
	l.pending = append(l.pending, rec)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// FlushEgress returns once every decision queued before it was called is
// committed (or failed to be, which is logged).
func (m *Manager) FlushEgress() {
	l := &m.egressLog
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.started && (len(l.pending) > 0 || l.writing) {
		l.changed.Wait()
	}
}

// writeEgress is the writer: it records whatever has queued up, a batch
// per transaction, for as long as the process lives.
func (m *Manager) writeEgress() {
	l := &m.egressLog
	for range l.wake {
		for {
			l.mu.Lock()
			n := min(len(l.pending), egressBatchMax)
			if n == 0 {
				l.writing = false
				l.changed.Broadcast()
				l.mu.Unlock()
				break
			}
			batch := make([]store.EgressRecord, n)
			copy(batch, l.pending)
			l.pending = append(l.pending[:0], l.pending[n:]...)
			l.writing = true
			l.changed.Broadcast()
			l.mu.Unlock()
			m.recordEgressBatch(batch)
		}
	}
}

// recordEgressBatch commits batch; if the transaction fails, each
// decision is tried on its own, so that one bad row costs only itself.
func (m *Manager) recordEgressBatch(batch []store.EgressRecord) {
	ctx := context.Background()
	err := m.st.RecordEgressBatch(ctx, batch)
	if err == nil {
		return
	}
	m.log.WarnContext(ctx, "recording egress decisions, one by one now", "decisions", len(batch), "err", err)
	for _, r := range batch {
		if r.Usage != nil {
			_, err = m.st.RecordEgress(ctx, *r.Usage, r.Event)
		} else {
			_, err = m.st.AppendEvent(ctx, r.Event)
		}
		if err != nil {
			m.log.WarnContext(ctx, "recording egress decision", KeySandbox, r.Event.SandboxID, "type", r.Event.Type, "err", err)
		}
	}
}
