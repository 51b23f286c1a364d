package manager

import (
	"context"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// followPoll is how often a follower looks at the log even without being
// told of an append: events a process other than this daemon appends are
// seen within it.
const followPoll = 2 * time.Second

// followBatch caps the events one look hands a follower.
const followBatch = 1000

// eventBus tells followers that the event log grew. Each append closes
// the current channel and starts a new one: a follower that took the
// channel before looking at the log cannot miss an append made after it
// looked.
type eventBus struct {
	mu sync.Mutex
	ch chan struct{}
}

func newEventBus() *eventBus { return &eventBus{ch: make(chan struct{})} }

func (b *eventBus) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *eventBus) notify() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}

// notifyingStore tells the bus of every event appended through it, by
// the manager or by the packages it hands the store to (the repo cache).
type notifyingStore struct {
	store.Store
	bus *eventBus
}

func (s notifyingStore) FinishExecEvent(ctx context.Context, x store.Exec, e store.Event) (store.Event, error) {
	e, err := s.Store.FinishExecEvent(ctx, x, e)
	if err == nil {
		s.bus.notify()
	}
	return e, err
}

func (s notifyingStore) UpdateSandboxEvent(ctx context.Context, sb store.Sandbox, e store.Event) (store.Event, error) {
	e, err := s.Store.UpdateSandboxEvent(ctx, sb, e)
	if err == nil {
		s.bus.notify()
	}
	return e, err
}

func (s notifyingStore) UpdateWorkspaceEvent(ctx context.Context, w store.Workspace, e store.Event) (store.Event, error) {
	e, err := s.Store.UpdateWorkspaceEvent(ctx, w, e)
	if err == nil {
		s.bus.notify()
	}
	return e, err
}

func (s notifyingStore) RecordEgress(ctx context.Context, u store.EgressUsage, e store.Event) (store.Event, error) {
	e, err := s.Store.RecordEgress(ctx, u, e)
	if err == nil {
		s.bus.notify()
	}
	return e, err
}

func (s notifyingStore) RecordEgressBatch(ctx context.Context, recs []store.EgressRecord) error {
	err := s.Store.RecordEgressBatch(ctx, recs)
	if err == nil {
		s.bus.notify()
	}
	return err
}

func (s notifyingStore) AppendEvent(ctx context.Context, e store.Event) (store.Event, error) {
	e, err := s.Store.AppendEvent(ctx, e)
	if err == nil {
		s.bus.notify()
	}
	return e, err
}

// FollowEvents hands send every event that f selects, in order: first
// those already in the log after f.AfterID, then each new one as it is
// appended, until ctx ends (which returns nil) or send fails (which
// returns its error). No event is missed between the listing and the
// waiting: the log is read again after every append, from the last ID
// sent. IDs grow in commit order because the store serialises appends.
func (m *Manager) FollowEvents(ctx context.Context, f store.EventFilter, send func([]store.Event) error) error {
	f.Limit = followBatch
	poll := time.NewTicker(followPoll)
	defer poll.Stop()
	for {
		changed := m.events.changed()
		evs, err := m.st.ListEvents(ctx, f)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(evs) > 0 {
			if err := send(evs); err != nil {
				return err
			}
			f.AfterID = evs[len(evs)-1].ID
			if len(evs) == followBatch {
				continue // more are waiting
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-poll.C:
		}
	}
}
