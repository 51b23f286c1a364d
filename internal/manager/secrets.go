package manager

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Secrets is the daemon's secret store (package secrets).
type Secrets interface {
	Set(ctx context.Context, name string, value []byte) error
	List(ctx context.Context) ([]store.SealedSecret, error)
	Delete(ctx context.Context, name string) error
	// Values returns every value, for checks of what leaves a workspace.
	Values(ctx context.Context) ([][]byte, error)
}

func (m *Manager) secretStore() (Secrets, error) {
	if m.cfg.Secrets == nil {
		return nil, fmt.Errorf("this daemon has no secret store: %w", errdefs.ErrUnavailable)
	}
	return m.cfg.Secrets, nil
}

// SetSecret stores a secret. The event records the name, never the value.
func (m *Manager) SetSecret(ctx context.Context, name string, value []byte) error {
	s, err := m.secretStore()
	if err != nil {
		return err
	}
	if err := s.Set(ctx, name, value); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "secret.set"}, map[string]any{"name": name, "bytes": len(value)})
	return nil
}

// ListSecrets returns the secrets' names and times.
func (m *Manager) ListSecrets(ctx context.Context) ([]store.SealedSecret, error) {
	s, err := m.secretStore()
	if err != nil {
		return nil, err
	}
	return s.List(ctx)
}

// RemoveSecret deletes a secret.
func (m *Manager) RemoveSecret(ctx context.Context, name string) error {
	s, err := m.secretStore()
	if err != nil {
		return err
	}
	if err := s.Delete(ctx, name); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "secret.removed"}, map[string]any{"name": name})
	return nil
}
