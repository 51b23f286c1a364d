package manager

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// ListNodes lists the daemons sharing the store, judged now.
func (m *Manager) ListNodes(ctx context.Context) ([]store.Node, error) {
	return m.st.ListNodes(ctx, time.Now().UTC())
}
