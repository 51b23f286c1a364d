package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/kubernetes"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// backends builds every execution backend this host offers and picks the
// default one. A backend that cannot start here is left out and logged;
// a sandbox that asks for it then gets a clear error. The returned func
// releases what the backends hold (the local backend's jails die with it).
func backends(ctx context.Context, cfg config.Config, log *slog.Logger) (map[string]sandbox.Backend, map[string]string, string, func()) {
	out := map[string]sandbox.Backend{}
	unavailable := map[string]string{}
	closers := []func() error{}
	// Each daemon binds under a directory of its own: a backend sweeps
	// the binds in its directory that have no container, and another
	// daemon's create under way has none yet.
	mounts := filepath.Join("/run/agentbox", manager.OwnerID(cfg.DataDir))
	for _, o := range []docker.Options{
		{Name: docker.NameDocker, Runtime: docker.RuntimeRunc, Host: cfg.DockerHost, MountDir: filepath.Join(mounts, docker.NameDocker)},
		{Name: docker.NameGVisor, Runtime: docker.RuntimeRunsc, Host: cfg.DockerHost, MountDir: filepath.Join(mounts, docker.NameGVisor)},
	} {
		b, err := docker.New(o)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = b.List(pctx, map[string]string{sandbox.LabelManaged: "1"})
			cancel()
		}
		if err != nil {
			log.Warn("execution backend unavailable", "backend", o.Name, "err", err)
			unavailable[o.Name] = err.Error()
			continue
		}
		out[o.Name] = b
	}
	lb, err := local.New(local.Options{
		StateDir:  filepath.Join(cfg.DataDir, "local"),
		ImagesDir: filepath.Join(cfg.DataDir, "images"),
		Logger:    log,
	})
	if err != nil {
		log.Warn("execution backend unavailable", "backend", local.Name, "err", err)
		unavailable[local.Name] = err.Error()
	} else {
		out[local.Name] = lb
		closers = append(closers, lb.Close)
	}
	if k := cfg.Kubernetes; k != nil {
		kctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		kb, err := kubernetes.New(kctx, kubernetes.Options{
			Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, Node: k.Node, RuntimeClass: k.RuntimeClass, RuntimeClasses: k.RuntimeClasses, Logger: log,
			MountDir: filepath.Join(mounts, kubernetes.Name),
			// The daemon is on its pods' node (their workspaces are on its
			// disk), so what it does there must succeed.
			RequireNode: true,
		})
		cancel()
		if err != nil {
			log.Warn("execution backend unavailable", "backend", kubernetes.Name, "err", err)
			unavailable[kubernetes.Name] = err.Error()
		} else {
			out[kubernetes.Name] = kb
		}
	} else {
		unavailable[kubernetes.Name] = "not configured: set kubernetes.kubeconfig in the daemon's config (or AGENTBOX_KUBECONFIG)"
	}
	def := cfg.DefaultBackend
	if def == "auto" {
		def = "local"
		if _, ok := out["docker"]; ok {
			def = "docker"
		}
	}
	closeAll := func() {
		for _, c := range closers {
			if err := c(); err != nil {
				log.Warn("closing an execution backend", "err", err)
			}
		}
	}
	return out, unavailable, def, closeAll
}

// guestBinary finds the agentbox-guest binary.
func guestBinary(cfg config.Config) (string, error) {
	p := cfg.GuestBinary
	if p == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		p = filepath.Join(filepath.Dir(exe), "agentbox-guest")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("agentbox-guest binary %s: %w (build it: CGO_ENABLED=0 go build -o %s ./cmd/agentbox-guest)", p, err, p)
	}
	return p, nil
}
