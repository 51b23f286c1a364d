// Package daemon runs `agentbox serve`: it opens the state, lets the
// manager repair what a crash or reboot left (re-mounting every workspace)
// and only then starts answering on the unix socket or on TCP.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/dashboard"
	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/egress/mitm"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/forge"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/solve"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/telemetry"
	"github.com/agentbox/agentbox/internal/workspace"
)

// NewLogger builds the daemon's logger from the configuration.
func NewLogger(cfg config.Config, w *os.File) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	// Every line logged with a context names the objects of that context
	// (request, workspace, sandbox, exec): see package logx.
	if cfg.LogFormat == "text" {
		return slog.New(logx.NewHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(logx.NewHandler(slog.NewJSONHandler(w, opts)))
}

// Run serves until ctx ends, then shuts down gracefully. ready, if set, is
// called with the listening address once requests are accepted.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ready func(addr string)) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// The daemon also stops, as on SIGTERM, when it loses its hold on the
	// store; Run then returns the reason.
	ctx, stopRun := context.WithCancelCause(ctx)
	defer func() {
		if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		stopRun(nil)
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir %s: %w", cfg.DataDir, err)
	}
	// One daemon per data dir, before anything else: a second one would
	// take the first's running sandboxes for the leftovers of a crash.
	held, err := holdDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer held.Unlock()
	// Then listen: a second daemon on the same socket (with another data
	// dir) must fail before it touches any state.
	ln, addr, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	var e2bLn net.Listener
	if hostport, ok := strings.CutPrefix(cfg.E2BListen, "tcp://"); ok {
		if e2bLn, err = net.Listen("tcp", hostport); err != nil {
			return fmt.Errorf("listening on %s (e2b_listen): %w", cfg.E2BListen, err)
		}
		defer e2bLn.Close()
	}

	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	// Daemons share a PostgreSQL database as nodes, each owning its
	// objects; a lock they hold shared keeps a migration from writing
	// into it meanwhile (and them from starting during one).
	release, err := st.HoldShared(ctx, func(err error) {
		log.Error("stopping: a migration holds the store", "err", err)
		stopRun(err)
	})
	if err != nil {
		return err
	}
	defer release()
	// A node of the store from here on, before the first request: its
	// stop is recorded last, after the shutdown has finished the work.
	node, stopNode, err := runNode(ctx, st, cfg, addr, log)
	if err != nil {
		return err
	}
	defer stopNode()
	bes, unavailable, defBackend, closeBackends := backends(ctx, cfg, log)
	defer closeBackends()
	gb, err := guestBinary(cfg)
	if err != nil {
		// Workspaces still work; sandboxes report this when asked for.
		log.Warn("sandboxes unavailable", "err", err)
		gb = ""
	}
	metrics := telemetry.New(telemetry.Options{Backends: backendNames(bes), Sandboxes: countSandboxes(st, node.ID), RepairKinds: manager.RepairKinds})
	// The egress proxy reports its decisions to the manager, which exists
	// only once New returns; no sandbox (so no decision) comes before.
	var mgr atomic.Pointer[manager.Manager]
	allowances, err := cfg.ResolveAllowances()
	if err != nil {
		return err
	}
	proxy := egress.New(egress.Options{Logger: log.With("component", "egress"), OnDecision: func(d egress.Decision) {
		metrics.ObserveEgress(d.Allowed)
		if m := mgr.Load(); m != nil {
			m.RecordEgress(manager.EgressDecision(d))
		}
	}, ResolveAllow: allowances, OnResolveAllow: func(host string, _ netip.Addr) { metrics.ObserveResolveAllowance(host) }})
	admitter, err := dependencies(cfg, proxy, log)
	if err != nil {
		return err
	}
	defer admitter.Close()
	box, err := secrets.Open(cfg.DataDir, st)
	if err != nil {
		return err
	}
	ca, err := mitm.LoadOrCreateCA(filepath.Join(cfg.DataDir, "ca"))
	if err != nil {
		return fmt.Errorf("interception CA: %w", err)
	}
	m, err := manager.New(ctx, st, manager.Config{
		DataDir: cfg.DataDir, Driver: cfg.WorkspaceDriver, UID: cfg.SandboxUID, GID: cfg.SandboxGID,
		GuestUID: cfg.GuestUID, GuestGID: cfg.GuestGID,
		Author:     workspace.Author{Name: cfg.AuthorName, Email: cfg.AuthorEmail},
		GitTimeout: cfg.GitTimeout.Duration, MaxDiffBytes: cfg.MaxDiffBytes, Logger: log, DiskQuota: int64(cfg.WorkspaceDiskQuota),
		Backends: bes, Unavailable: unavailable, DefaultBackend: defBackend, DefaultImage: cfg.DefaultImage, GuestBinary: gb,
		Egress: proxy, Dependencies: admitter, Secrets: box, Forges: forge.Open, CABundle: caBundle(ca), Observer: metrics,
		IdleTimeout: cfg.SandboxIdleTimeout.Duration, MaxAge: cfg.SandboxMaxAge.Duration, WarmPool: warmPools(cfg),
		DataBudget: int64(cfg.DataBudget), WorkspaceRetention: cfg.WorkspaceRetention.Duration, AutoApprove: cfg.AutoApprove, PushBranch: cfg.PushBranch, NodeID: node.ID,
		Intercept: func(allow manager.Allowlist, bound []manager.BoundSecret) (manager.Allowlist, map[string]string, error) {
			s := make([]mitm.Secret, len(bound))
			for i, b := range bound {
				s[i] = mitm.Secret(b)
			}
			return mitm.Wrap(ca, allow, s)
		},
	})
	if err != nil {
		return err
	}
	mgr.Store(m)
	// Unclaimed pooled environments go with the daemon (a crash leaves
	// them to the next start, which removes them).
	defer func() {
		if err := m.StopPool(context.WithoutCancel(ctx)); err != nil {
			log.Warn("removing the warm pool's environments", "err", err)
		}
	}()
	if every := evictionInterval(cfg.SandboxIdleTimeout.Duration, cfg.SandboxMaxAge.Duration); every > 0 {
		go m.RunEviction(ctx, every)
	}
	if cfg.DataBudget > 0 {
		go m.RunGC(ctx, cfg.GCInterval.Duration)
	}
	if every := cfg.ReconcileInterval.Duration; every > 0 {
		go m.RunReconcile(ctx, every)
	}
	// Lost nodes are looked for at every heartbeat: their sandboxes are
	// marked lost and their shared workspaces adopted (see TakeOver).
	go m.RunTakeOver(ctx, cfg.NodeHeartbeat.Duration)
	// MCP over streamable HTTP at /mcp: the tools of `agentbox mcp`, over
	// the manager, behind the API's authentication.
	mcpServer := mcpserver.New(mcpserver.ManagerBackend(m), mcpserver.Options{Version: api.Version, Logger: log.With("component", "mcp")})
	mcpHTTP := mcpServer.HTTPHandler()
	// The agent loop runs here, not in the CLI: a run outlives its
	// client, and resumes from its last recorded step at the next start.
	solver := solve.NewRunner(m, solve.Options{Providers: solveProviders(box), Observe: metrics.ObserveSolveFailure, Logger: log.With("component", "solve")})
	defer solver.Close()
	if err := solver.Resume(ctx); err != nil {
		log.Warn("resuming solve runs", "err", err)
	}
	// Forwarding between nodes only where several can share the store
	// (PostgreSQL): a SQLite store is this daemon's alone, and looking up
	// an owner would cost every request a read for nothing.
	var nodeKey []byte
	if cfg.Store != "" {
		if nodeKey, err = clusterKey(ctx, st); err != nil {
			return err
		}
	}
	apiServer := api.New(m, api.Options{Token: cfg.Token, Logger: log, Metrics: metrics.Handler(), MCP: mcpHTTP, Solver: solver, NodeKey: nodeKey})
	// The web dashboard at / and /ui/, in front of the API: it logs in
	// with the same token and calls /v1 through it.
	web, err := dashboard.New(dashboard.Options{Token: cfg.Token, API: apiServer, Logger: log.With("component", "dashboard"),
		PublicOrigin: cfg.Dashboard.PublicOrigin})
	if err != nil {
		return err
	}
	// Requests do not end with ctx (SIGTERM) but with reqCtx, at the end
	// of the grace period; see shutdown. MCP tool calls run in their
	// sessions, not in a request: they end then too.
	reqCtx, cancelReqCtx := context.WithCancel(context.WithoutCancel(ctx))
	cancelRequests := func() {
		cancelReqCtx()
		mcpServer.Abort()
	}
	defer cancelRequests()
	reqs := newInflight()
	srv := &http.Server{
		Handler:           reqs.wrap(web),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
	srv.RegisterOnShutdown(apiServer.Shutdown)
	// MCP sessions end once their calls have answered, and with them
	// their streams, which would hold the shutdown.
	srv.RegisterOnShutdown(mcpHTTP.Shutdown)
	srvs := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("agentbox serving", "addr", addr, "data_dir", cfg.DataDir, "store", storeName(cfg), "workspace_driver", m.Driver())
	if e2bLn != nil {
		// The E2B endpoint: E2B's control API and envd on one address,
		// over the same manager, requests counted and ended with the API's.
		e2bServer, err := e2b.New(m, e2b.Options{Token: cfg.Token, DataDir: cfg.DataDir, Templates: e2bTemplates(cfg),
			InternetAllow: cfg.E2BInternetAllow, Logger: log.With("component", "e2b")})
		if err != nil {
			return err
		}
		defer e2bServer.Close()
		e2bSrv := &http.Server{
			Handler:           reqs.wrap(e2bServer),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
			BaseContext:       func(net.Listener) context.Context { return reqCtx },
		}
		srvs = append(srvs, e2bSrv)
		go func() { errc <- e2bSrv.Serve(e2bLn) }()
		log.Info("agentbox serving the E2B endpoint", "addr", "tcp://"+e2bLn.Addr().String())
	}
	if ready != nil {
		ready(addr)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving %s: %w", addr, err)
	case <-ctx.Done():
	}
	log.Info("agentbox stopping", "grace", cfg.ShutdownGrace.Duration)
	shutdown(srvs, reqs, cancelRequests, m, cfg.ShutdownGrace.Duration, log)
	log.Info("agentbox stopped")
	if strings.HasPrefix(addr, "unix://") {
		os.Remove(strings.TrimPrefix(addr, "unix://"))
	}
	return nil
}

// e2bTemplates is the configuration's template table as package e2b
// takes it.
func e2bTemplates(cfg config.Config) map[string]e2b.Template {
	out := map[string]e2b.Template{}
	for name, t := range cfg.E2BTemplates {
		out[name] = e2b.Template{Image: t.Image, Backend: t.Backend, User: t.User, Home: t.Home}
	}
	return out
}

// backendNames lists the usable backends, whose metric series exist from
// the start.
func backendNames(bes map[string]sandbox.Backend) []string {
	names := make([]string, 0, len(bes))
	for name := range bes {
		names = append(names, name)
	}
	return names
}

// countSandboxes feeds agentbox_sandboxes at scrape time: one query over
// the sandbox rows of this node, counted by state and backend (each node
// of a shared store reports its own, so that their sum is the whole).
func countSandboxes(st store.Store, node string) telemetry.CountSandboxes {
	return func(ctx context.Context) (map[telemetry.SandboxKey]int, error) {
		sbs, err := st.ListSandboxes(ctx, store.SandboxFilter{})
		if err != nil {
			return nil, fmt.Errorf("counting sandboxes: %w", err)
		}
		n := make(map[telemetry.SandboxKey]int)
		for _, sb := range sbs {
			if sb.Node != node && sb.Node != "" {
				continue
			}
			n[telemetry.SandboxKey{sb.State, sb.Backend}]++
		}
		return n, nil
	}
}

func listen(cfg config.Config) (net.Listener, string, error) {
	if hostport, ok := strings.CutPrefix(cfg.Listen, "tcp://"); ok {
		ln, err := net.Listen("tcp", hostport)
		if err != nil {
			return nil, "", fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		return ln, "tcp://" + ln.Addr().String(), nil
	}
	sock := cfg.SocketPath()
	if _, err := os.Lstat(sock); err == nil {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("another agentbox daemon is serving on %s: %w", sock, errdefs.ErrConflict)
		}
		// A socket left by a daemon that died: nobody answers it.
		if err := os.Remove(sock); err != nil {
			return nil, "", fmt.Errorf("removing stale socket %s: %w", sock, err)
		}
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, "", fmt.Errorf("listening on %s: %w", sock, err)
	}
	// The data dir is 0700 already; the socket is 0600 as well so that a
	// looser data dir never widens access.
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, "", err
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	return ln, "unix://" + sock, nil
}

// openStore opens the configured database: the PostgreSQL one that
// cfg.Store names, or the SQLite file in the data dir.
func openStore(ctx context.Context, cfg config.Config) (*sqlstore.Store, error) {
	if cfg.Store != "" {
		return sqlstore.OpenPostgres(ctx, cfg.Store)
	}
	return sqlstore.Open(ctx, filepath.Join(cfg.DataDir, "agentbox.db"))
}

// storeName is the store for logs: never with its password.
func storeName(cfg config.Config) string {
	if cfg.Store != "" {
		return store.RedactURL(cfg.Store)
	}
	return filepath.Join(cfg.DataDir, "agentbox.db")
}

// lockName is the data dir's daemon lock, which holds the holder's pid.
const lockName = "daemon.lock"

// holdDataDir locks the data dir for this daemon's lifetime, or refuses,
// naming the pid of the live daemon that holds it. The lock is flock(2)'s:
// it goes with its holder however that ends, so a crashed daemon never
// blocks the next, and close-on-exec, so no child keeps it.
func holdDataDir(dir string) (*flock.Lock, error) {
	path := filepath.Join(dir, lockName)
	l, err := flock.TryAcquire(path)
	if errors.Is(err, flock.ErrHeld) {
		holder := "unknown pid"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		return nil, fmt.Errorf("data dir %s is held by another agentbox daemon (%s): stop it, or serve another --data dir: %w", dir, holder, errdefs.ErrConflict)
	}
	if err != nil {
		return nil, err
	}
	f := l.File()
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		l.Unlock()
		return nil, fmt.Errorf("recording this daemon in %s: %w", path, err)
	}
	return l, nil
}

// systemRoots is where Debian keeps the usual roots.
const systemRoots = "/etc/ssl/certs/ca-certificates.crt"

// caBundle is what a sandbox with secrets trusts: the usual roots, so that
// hosts the proxy does not intercept still verify, and the daemon's CA.
func caBundle(ca *mitm.CA) []byte {
	roots, _ := os.ReadFile(systemRoots)
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		roots = append(roots, '\n')
	}
	return append(roots, ca.CertPEM()...)
}

// evictionInterval is how often idle and old sandboxes are looked for: a
// quarter of the shorter limit, between a second and a minute; 0 when no
// limit is set.
func evictionInterval(idle, maxAge time.Duration) time.Duration {
	limit := idle
	if limit <= 0 || (maxAge > 0 && maxAge < limit) {
		limit = maxAge
	}
	if limit <= 0 {
		return 0
	}
	return min(max(limit/4, time.Second), time.Minute)
}

// warmPools is the configuration's warm pools, as the manager takes them.
func warmPools(cfg config.Config) []manager.PoolSpec {
	var out []manager.PoolSpec
	for _, p := range cfg.WarmPool {
		out = append(out, manager.PoolSpec{Backend: p.Backend, Image: p.Image, Size: p.Size,
			Limits: sandbox.Limits{CPUs: p.CPUs, MemoryBytes: int64(p.Memory), Pids: p.Pids, TmpBytes: int64(p.Tmp)}})
	}
	return out
}

// HoldDataDir is holdDataDir for tools that must not run beside a daemon
// (agentbox migrate): it refuses while one holds dir, and keeps any from
// starting until the lock is released.
func HoldDataDir(dir string) (*flock.Lock, error) { return holdDataDir(dir) }
