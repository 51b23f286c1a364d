package sqlstore_test

import (
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := sqlstore.Open(t.Context(), filepath.Join(t.TempDir(), "agentbox.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestReopen checks that migrations are idempotent and data persists.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s, err := sqlstore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendEvent(t.Context(), store.Event{Actor: "t", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlstore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev, err := s.ListEvents(t.Context(), store.EventFilter{})
	if err != nil || len(ev) != 1 {
		t.Fatalf("after reopen: %d events, %v", len(ev), err)
	}
}
