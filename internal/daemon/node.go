package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/atomicfile"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// nodeIDName is the file in the data dir that keeps this daemon's node ID,
// so that a restart is the same node to the others sharing the store.
const nodeIDName = "node-id"

// nodeID reads the data dir's node ID, making one at the first start.
func nodeID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, nodeIDName)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !ids.HasPrefix(id, "node") {
			return "", fmt.Errorf("%s holds %q, not a node ID: remove it to make a new one: %w", path, id, errdefs.ErrInvalid)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := ids.New("node")
	if err := atomicfile.WriteNew(path, 0o600, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("recording the node ID in %s: %w", path, err)
	}
	return id, nil
}

// forwardKeyName is the cluster value holding the key nodes sign
// forwarded requests with.
const forwardKeyName = "forward_key"

// clusterKey returns the key the nodes sharing the store sign forwarded
// requests with: made by the first node to start, kept in the store.
func clusterKey(ctx context.Context, st store.Store) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	v, err := st.ClusterValue(ctx, forwardKeyName, hex.EncodeToString(fresh))
	if err != nil {
		return nil, fmt.Errorf("the nodes' forwarding key: %w", err)
	}
	key, err := hex.DecodeString(v)
	if err != nil || len(key) < 32 {
		return nil, fmt.Errorf("the nodes' forwarding key in the store is not 32 bytes of hex: %w", errdefs.ErrInvalid)
	}
	return key, nil
}

// runNode registers this daemon as a node of the store and beats its
// heartbeat every cfg.NodeHeartbeat until ctx ends; the returned stop
// records the clean stop. A heartbeat that fails is logged and retried at
// the next beat: the store may be unreachable for a while. The node is
// reached by the others at cfg.NodeAddr, or at addr, where it listens.
func runNode(ctx context.Context, st store.Store, cfg config.Config, addr string, log *slog.Logger) (_ store.Node, stop func(), err error) {
	id, err := nodeID(cfg.DataDir)
	if err != nil {
		return store.Node{}, nil, err
	}
	if cfg.NodeAddr != "" {
		addr = cfg.NodeAddr
	} else if host, _, _ := net.SplitHostPort(strings.TrimPrefix(addr, "tcp://")); strings.HasPrefix(addr, "tcp://") && cfg.Store != "" &&
		(host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified()) {
		log.Warn("this node listens on every address and has no node_addr: nodes on other machines cannot reach it to forward requests", "addr", addr)
	}
	every := cfg.NodeHeartbeat.Duration
	host, _ := os.Hostname()
	// Beats are on the store's clock, by which the others judge them.
	clock := func(ctx context.Context) time.Time {
		if t, err := st.Clock(ctx); err == nil {
			return t
		}
		return time.Now().UTC()
	}
	now := clock(ctx)
	n := store.Node{ID: id, Host: host, PID: os.Getpid(), DataDir: cfg.DataDir, Addr: addr, Version: api.Version, StartedAt: now, HeartbeatAt: now,
		Lease: 3 * every, Shared: cfg.NodeShared}
	// Registered even when a stop is already asked for: the stop is
	// recorded on the way out.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer rcancel()
	if err := st.RegisterNode(rctx, n); err != nil {
		return store.Node{}, nil, err
	}
	// Beats go on through the shutdown, until stop: a daemon finishing its
	// work is up.
	beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-t.C:
			}
			err := st.HeartbeatNode(beatCtx, id, clock(beatCtx))
			if errors.Is(err, errdefs.ErrNotFound) {
				// Removed behind our back: register again.
				n.HeartbeatAt = clock(beatCtx)
				err = st.RegisterNode(beatCtx, n)
			}
			if err != nil && beatCtx.Err() == nil {
				log.Warn("node heartbeat failed", "node_id", id, "err", err)
			}
		}
	}()
	log.Info("node registered", "node_id", id, "addr", addr, "heartbeat", every, "shared", cfg.NodeShared)
	return n, func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := st.StopNode(sctx, id, clock(sctx)); err != nil {
			log.Warn("recording the node's stop", "node_id", id, "err", err)
		}
	}, nil
}
