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

// egressLog is the queue of decisions not yet recorded. Its writer runs
// while there is something to write and ends when the queue is empty.
type egressLog struct {
	mu      sync.Mutex
	changed *sync.Cond // pending shrank, a batch is done, or the writer ended
	pending []store.EgressRecord
	writing bool // a writer runs
	// queued counts the decisions ever queued, done those the writer has
	// finished with; the queue is first in, first out.
	queued, done uint64
}

// enqueueEgress queues rec and starts a writer unless one runs.
func (m *Manager) enqueueEgress(rec store.EgressRecord) {
	l := &m.egressLog
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = sync.NewCond(&l.mu)
	}
	for len(l.pending) >= egressQueueMax {
		l.changed.Wait()
	}
	l.pending = append(l.pending, rec)
	l.queued++
	if !l.writing {
		l.writing = true
		go m.writeEgress()
	}
}

// FlushEgress returns once every decision queued before it was called is
// committed (or failed to be, which is logged), however many come after.
func (m *Manager) FlushEgress() {
	l := &m.egressLog
	l.mu.Lock()
	defer l.mu.Unlock()
	for target := l.queued; l.done < target; {
		l.changed.Wait()
	}
}

// writeEgress is the writer: it records what has queued up, a batch per
// transaction, until nothing is left. What queues while a batch commits
// makes the next batch.
func (m *Manager) writeEgress() {
	l := &m.egressLog
	for {
		l.mu.Lock()
		n := min(len(l.pending), egressBatchMax)
		if n == 0 {
			l.writing = false
			l.changed.Broadcast()
			l.mu.Unlock()
			return
		}
		batch := make([]store.EgressRecord, n)
		copy(batch, l.pending)
		l.pending = append(l.pending[:0], l.pending[n:]...)
		l.changed.Broadcast()
		l.mu.Unlock()
		m.recordEgressBatch(batch)
		l.mu.Lock()
		l.done += uint64(n)
		l.changed.Broadcast()
		l.mu.Unlock()
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
