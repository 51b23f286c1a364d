package daemon

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/egress"
)

// dependencies is the daemon's dependency admission over the operator's
// approved manifest: its fetches go out through the egress proxy's own
// checks (with the operator's resolve allowances), allowed to reach the
// manifest's pinned sources and nothing else.
func dependencies(cfg config.Config, proxy *egress.Proxy, log *slog.Logger) (*deps.Admitter, error) {
	m, err := cfg.Manifest()
	if err != nil {
		return nil, err
	}
	return deps.New(deps.Options{
		Manifest: m,
		Dial: func(ctx context.Context, allow deps.Allowlist, network, address string) (net.Conn, error) {
			return proxy.Dial(ctx, "dependencies", allow, network, address)
		},
		TempDir: filepath.Join(cfg.DataDir, "tmp", "deps"),
		Logger:  log.With("component", "deps"),
	})
}
