package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Warm pool. For each configured (backend, image) the manager keeps Size
// environments started ahead of time with the daemon's default policy:
// the guest runs and has connected, /workspace is an empty directory, and
// nothing of any task (workspace, secret, environment, policy) has been
// near it. A sandbox creation whose environment would be started exactly
// so (its class: backend, image, CPU, memory, pids and /tmp limits, and no
// egress proxy or secrets, which are wired in at the start) takes one
// instead: the backend attaches the workspace to it (sandbox.Attacher) and
// the per-command parts of the policy (environment, per-exec caps) apply
// from its first command, as they do in a cold sandbox. Every other
// creation, and one that finds the pool empty, starts cold.
//
// The reset boundary is that a pooled environment is used once: claimed,
// it is an ordinary sandbox of that workspace and is destroyed when that
// sandbox ends. It never goes back to the pool.
//
// Until claimed a pooled environment has no sandbox record: the pool
// holds it in memory, its directory is DataDir/pool/<id> (moved to the
// sandbox's directory on claim), and its environment carries
// sandbox.LabelPool "1" and sandbox.LabelPoolOwner PoolOwner(). StopPool
// removes every unclaimed one; after a crash, the next New removes those
// of this data dir that have no record.

// PoolSpec configures one warm pool.
type PoolSpec struct {
	// Backend is the backend's name; empty means the default backend.
	Backend string `json:"backend"`
	// Image is the image; empty means the default image.
	Image string `json:"image"`
	// Size is how many environments are kept ready.
	Size int `json:"size"`
	// Limits are the pool's policy class: its environments start with
	// them (zero fields: the defaults), and only a sandbox asking for the
	// same limits (by its spec or its policy's limits) takes one.
	Limits sandbox.Limits `json:"limits"`
}

// PoolObserver is implemented by an Observer that also wants the warm
// pool's figures; the manager finds it by type assertion.
type PoolObserver interface {
	// ObservePoolSize is called with the number of ready environments of
	// a pool whenever it changes.
	ObservePoolSize(backend, image string, ready int)
	// ObservePoolClaim is called once per sandbox creation whose class has
	// a pool: hit when it got a pooled environment, not when it started
	// cold because the pool was empty.
	ObservePoolClaim(backend, image string, hit bool)
}

// PoolStatus is the state of one warm pool.
type PoolStatus struct {
	Backend string `json:"backend"`
	Image   string `json:"image"`
	// Size is the configured size; Ready how many wait to be claimed.
	Size  int `json:"size"`
	Ready int `json:"ready"`
	// Hits and Misses count the creations of this class since the start.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Disabled says why the pool is never filled (its backend cannot
	// attach a workspace later); empty when it works.
	Disabled string `json:"disabled,omitempty"`
}

// poolRetryMin and poolRetryMax bound the wait before a failed start is
// retried.
const (
	poolRetryMin = time.Second
	poolRetryMax = time.Minute
)

// poolRefillDelay is how long a pool waits after a claim before it starts
// a replacement.
// Measured with agentbox bench pool on a loaded 2-core machine: the
// median claim → first exec fell from 28-36 ms to 20 ms with 300 ms.
const poolRefillDelay = 250 * time.Millisecond

// warmPool is the manager's pools.
type warmPool struct {
	m      *Manager
	owner  string
	dir    string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	classes []*poolClass
	stopped bool
}

// poolClass is one pool.
type poolClass struct {
	key      string
	spec     sandbox.Spec
	be       sandbox.Backend
	at       sandbox.Attacher
	size     int
	ready    []*pooledEnv // guarded by warmPool.mu, oldest first
	hits     int64
	misses   int64
	disabled string
	wake     chan struct{}
}

// pooledEnv is one environment started for a pool.
type pooledEnv struct {
	class     *poolClass
	id        string
	tokenHash string
	info      sandbox.Info
	ln        *guest.Listener
	conn      *guest.Conn
	dir       string
}

// PoolOwner is the value of sandbox.LabelPoolOwner on this manager's
// pooled environments: a hash of its data dir.
func (m *Manager) PoolOwner() string {
	abs, err := filepath.Abs(m.cfg.DataDir)
	if err != nil {
		abs = m.cfg.DataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:6])
}

// poolDir holds the run directories of unclaimed pooled environments.
func (m *Manager) poolDir() string { return filepath.Join(m.cfg.DataDir, "pool") }

// classKey is what an environment is started with and cannot change
// later. ok is false for a spec that wires its policy in at the start (an
// egress proxy socket, secrets' placeholders and CA bundle): it always
// starts cold.
func classKey(spec sandbox.Spec) (key string, ok bool) {
	if spec.Egress() || (spec.Policy != nil && len(spec.Policy.Secrets) > 0) {
		return "", false
	}
	l := spec.Limits
	return spec.Backend + "\x00" + spec.Image + "\x00" + strconv.FormatFloat(l.CPUs, 'g', -1, 64) + "\x00" +
		strconv.FormatInt(l.MemoryBytes, 10) + "\x00" + strconv.FormatInt(l.Pids, 10) + "\x00" + strconv.FormatInt(l.TmpBytes, 10), true
}

// startPool removes what a previous run's pools left, then starts filling
// the configured pools.
func (m *Manager) startPool(ctx context.Context) error {
	p := &warmPool{m: m, owner: m.PoolOwner(), dir: m.poolDir()}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.pool = p
	p.removeLeftovers(ctx)
	seen := map[string]bool{}
	for i, ps := range m.cfg.WarmPool {
		if ps.Size < 0 {
			return errdefs.Invalid("warm pool %d: size %d is negative", i, ps.Size)
		}
		if ps.Size == 0 {
			continue
		}
		spec, err := m.specFor(sandbox.Spec{Backend: ps.Backend, Image: ps.Image, Limits: ps.Limits})
		if err != nil {
			// A backend missing on this host leaves its pool empty, as it
			// leaves its creations failing: the daemon still serves.
			m.log.WarnContext(ctx, "warm pool not started", "backend", ps.Backend, "image", ps.Image, "err", err)
			continue
		}
		key, _ := classKey(spec)
		if seen[key] {
			return errdefs.Invalid("warm pool %d: backend %s image %s with limits %+v is configured twice", i, spec.Backend, spec.Image, spec.Limits)
		}
		seen[key] = true
		be, _ := m.backend(spec.Backend)
		c := &poolClass{key: key, spec: spec, be: be, size: ps.Size, wake: make(chan struct{}, 1)}
		p.classes = append(p.classes, c)
		at, ok := be.(sandbox.Attacher)
		if !ok {
			c.disabled = fmt.Sprintf("the %s backend cannot attach a workspace to a running environment: its sandboxes start cold", spec.Backend)
			m.log.WarnContext(ctx, "warm pool disabled", "backend", spec.Backend, "image", spec.Image, "reason", c.disabled)
			continue
		}
		c.at = at
		p.observeSize(c, 0)
		p.wg.Add(1)
		go p.fill(c)
	}
	return nil
}

// removeLeftovers removes this data dir's pooled environments that no
// sandbox record names (a crash left them unclaimed) and the pool's
// directory.
func (p *warmPool) removeLeftovers(ctx context.Context) {
	m := p.m
	for name, be := range m.cfg.Backends {
		if _, ok := be.(sandbox.Attacher); !ok {
			continue
		}
		envs, err := be.List(ctx, map[string]string{sandbox.LabelPool: "1", sandbox.LabelPoolOwner: p.owner})
		if err != nil {
			m.log.WarnContext(ctx, "listing pooled environments left by a previous run", "backend", name, "err", err)
			continue
		}
		for _, in := range envs {
			if _, err := m.st.GetSandbox(ctx, in.ID); err == nil {
				continue // claimed: recoverSandboxes dealt with it
			}
			if err := be.Remove(ctx, in.Ref); err != nil {
				m.log.WarnContext(ctx, "removing a pooled environment left by a previous run", KeySandbox, in.ID, "backend", name, "err", err)
				continue
			}
			m.event(ctx, store.Event{Actor: "daemon", Type: "pool.removed", SandboxID: in.ID},
				map[string]any{"backend": name, "ref": in.Ref, "reason": "left unclaimed by a previous run"})
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		m.log.WarnContext(ctx, "removing the warm pool's directory", "dir", p.dir, "err", err)
	}
}

// StopPool stops filling the warm pools and removes every environment
// that was not claimed. Claimed ones are sandboxes and stay.
func (m *Manager) StopPool(ctx context.Context) error {
	p := m.pool
	if p == nil {
		return nil
	}
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	p.stopped = true
	var envs []*pooledEnv
	for _, c := range p.classes {
		envs = append(envs, c.ready...)
		c.ready = nil
		p.observeSize(c, 0)
	}
	p.mu.Unlock()
	var errs []error
	for _, e := range envs {
		errs = append(errs, p.destroy(ctx, e))
	}
	os.Remove(p.dir) // when empty: a claim under way may still move out of it
	return errors.Join(errs...)
}

// PoolStatus reports on every configured warm pool.
func (m *Manager) PoolStatus() []PoolStatus {
	p := m.pool
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PoolStatus, 0, len(p.classes))
	for _, c := range p.classes {
		out = append(out, PoolStatus{Backend: c.spec.Backend, Image: c.spec.Image, Size: c.size, Ready: len(c.ready),
			Hits: c.hits, Misses: c.misses, Disabled: c.disabled})
	}
	return out
}

// Pooled reports whether the environment of sandbox id is an unclaimed
// pooled one of this manager (which no sandbox record names).
func (m *Manager) Pooled(id string) bool {
	p := m.pool
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.classes {
		for _, e := range c.ready {
			if e.id == id {
				return true
			}
		}
	}
	return false
}

func (p *warmPool) observeSize(c *poolClass, n int) {
	if o, ok := p.m.cfg.Observer.(PoolObserver); ok {
		o.ObservePoolSize(c.spec.Backend, c.spec.Image, n)
	}
}

// fill keeps class c at its size until the pool stops.
func (p *warmPool) fill(c *poolClass) {
	defer p.wg.Done()
	log := p.m.log.With("backend", c.spec.Backend, "image", c.spec.Image)
	retry := poolRetryMin
	for {
		p.mu.Lock()
		need := len(c.ready) < c.size
		p.mu.Unlock()
		if !need {
			select {
			case <-p.ctx.Done():
				return
			case <-c.wake:
			}
			// A claim woke the pool: its sandbox's first commands come
			// first, the engine's work of a refill (and its mount
			// operations, which contend with the claim's) after them.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(poolRefillDelay):
			}
			continue
		}
		e, err := p.start(c)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			if errors.Is(err, sandbox.ErrNoAttach) {
				p.mu.Lock()
				c.disabled = err.Error()
				p.mu.Unlock()
				log.Warn("warm pool disabled: its sandboxes start cold", "err", err)
				return
			}
			log.Warn("starting a pooled environment", "err", err, "retry_in", retry)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(2*retry, poolRetryMax)
			continue
		}
		retry = poolRetryMin
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			p.destroy(context.Background(), e)
			return
		}
		c.ready = append(c.ready, e)
		p.observeSize(c, len(c.ready))
		p.mu.Unlock()
		log.Debug("pooled environment ready", KeySandbox, e.id)
		p.wg.Add(1)
		go p.watch(e)
	}
}

// watch discards e if its guest goes away while it waits to be claimed.
func (p *warmPool) watch(e *pooledEnv) {
	defer p.wg.Done()
	select {
	case <-p.ctx.Done():
		return
	case <-e.conn.Done():
	}
	if p.unready(e) {
		p.discard(e, "guest connection gone")
	}
}

// unready takes e out of its pool's ready list; false if it was not there
// (claimed, or taken by StopPool).
func (p *warmPool) unready(e *pooledEnv) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := e.class
	for i, x := range c.ready {
		if x == e {
			c.ready = append(c.ready[:i], c.ready[i+1:]...)
			p.observeSize(c, len(c.ready))
			return true
		}
	}
	return false
}

// discard destroys an unclaimed environment that cannot be handed out,
// records why, and has its pool refilled.
func (p *warmPool) discard(e *pooledEnv, why string) {
	ctx := context.Background()
	if err := p.destroy(ctx, e); err != nil {
		p.m.log.Warn("removing a discarded pooled environment", KeySandbox, e.id, "err", err)
	}
	p.m.event(ctx, store.Event{Actor: "daemon", Type: "pool.discarded", SandboxID: e.id},
		map[string]any{"backend": e.class.spec.Backend, "image": e.class.spec.Image, "ref": e.info.Ref, "reason": why})
	e.class.poke()
}

func (c *poolClass) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// start starts one environment for class c and waits for its guest.
func (p *warmPool) start(c *poolClass) (_ *pooledEnv, err error) {
	m := p.m
	if m.cfg.GuestBinary == "" {
		return nil, fmt.Errorf("no agentbox-guest binary configured: %w", errdefs.ErrUnavailable)
	}
	token, err := guest.NewToken()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token))
	e := &pooledEnv{class: c, id: ids.New("sb"), tokenHash: hex.EncodeToString(sum[:])}
	e.dir = filepath.Join(p.dir, e.id)
	runDir := filepath.Join(e.dir, "run")
	var undo cleanup
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("pooled sandbox %s: %w", e.id, err)
	}
	undo.add(func() { os.RemoveAll(e.dir) })
	if err := m.ownRunDir(runDir); err != nil {
		return nil, fmt.Errorf("pooled sandbox %s: %w", e.id, err)
	}
	hid := m.hideHostPaths(p.ctx, e.dir, runDir)
	undo.add(hid.detach)
	if e.ln, err = guest.Listen(filepath.Join(runDir, "agentbox.sock"), token, m.listenOptions(e.id, "")); err != nil {
		return nil, fmt.Errorf("pooled sandbox %s: %w", e.id, err)
	}
	undo.add(func() { e.ln.Close() })
	// Not cancelled by StopPool: an engine may finish a create whose
	// request was cancelled, leaving a container that no rollback knows.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(p.ctx), 2*time.Minute)
	defer ccancel()
	e.info, err = c.at.CreateDetached(cctx, sandbox.CreateRequest{
		ID: e.id, RunDir: runDir, Guest: hid.guest, GuestEnv: []string{guest.TokenEnv + "=" + token},
		UID: m.cfg.UID, GID: m.cfg.GID, GuestUID: m.cfg.GuestUID, GuestGID: m.cfg.GuestGID, Spec: c.spec, Owner: m.owner(),
	}, p.owner)
	if err != nil {
		return nil, fmt.Errorf("pooled sandbox %s on %s: %w", e.id, c.spec.Backend, err)
	}
	go hid.detach()
	undo.add(func() { c.be.Remove(context.Background(), e.info.Ref) })
	timeout := m.cfg.GuestConnectTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	actx, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	e.conn, err = e.ln.Accept(actx)
	hid.detach()
	if err != nil {
		return nil, fmt.Errorf("pooled sandbox %s on %s: the guest did not connect within %s: %w", e.id, c.spec.Backend, timeout, errdefs.ErrUnavailable)
	}
	// What the first command would look up (the docker backend asks the
	// engine where the environment's memory cgroup is, once) is looked up
	// now, off the claim's path.
	if oc, ok := c.be.(sandbox.OOMCounter); ok {
		if _, err := oc.OOMKills(actx, e.info.Ref); err != nil {
			m.log.Debug("reading a pooled environment's OOM kill count", KeySandbox, e.id, "err", err)
		}
	}
	return e, nil
}

// destroy removes an environment that is no sandbox's (any more).
func (p *warmPool) destroy(ctx context.Context, e *pooledEnv) error {
	// The listener first: a guest whose connection drops dials again.
	e.ln.Close()
	if e.conn != nil {
		e.conn.Close()
	}
	err := e.class.be.Remove(context.WithoutCancel(ctx), e.info.Ref)
	os.RemoveAll(e.dir)
	return err
}

// claim takes a ready environment of spec's class, if there is one whose
// guest answers, and has the pool refilled. hasPool says whether spec's
// class has a pool at all.
func (p *warmPool) claim(ctx context.Context, spec sandbox.Spec) (e *pooledEnv, hasPool bool) {
	key, ok := classKey(spec)
	if !ok {
		return nil, false
	}
	var c *poolClass
	for _, x := range p.classes {
		if x.key == key {
			c = x
		}
	}
	if c == nil {
		return nil, false
	}
	defer c.poke()
	for {
		p.mu.Lock()
		if len(c.ready) == 0 {
			p.mu.Unlock()
			return nil, true
		}
		e = c.ready[0]
		c.ready = c.ready[1:]
		p.observeSize(c, len(c.ready))
		p.mu.Unlock()
		// A guest that died while it waited may not have been noticed yet:
		// one round trip proves it is there.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := e.conn.Ping(pctx)
		cancel()
		if err == nil {
			return e, true
		}
		go p.discard(e, "guest did not answer a ping at claim: "+err.Error())
	}
}

// counted records one creation of a class that has a pool.
func (p *warmPool) counted(c *poolClass, hit bool) {
	p.mu.Lock()
	if hit {
		c.hits++
	} else {
		c.misses++
	}
	p.mu.Unlock()
	if o, ok := p.m.cfg.Observer.(PoolObserver); ok {
		o.ObservePoolClaim(c.spec.Backend, c.spec.Image, hit)
	}
}

// fromPool starts w's sandbox in a pooled environment if spec's class has
// one ready. ok false means none was used (no pool, empty, or attaching
// failed) and the caller starts cold; pooled says whether the class has a
// pool.
func (m *Manager) fromPool(ctx context.Context, w store.Workspace, spec sandbox.Spec, replaces string) (sb store.Sandbox, ok, pooled bool) {
	p := m.pool
	if p == nil {
		return sb, false, false
	}
	e, pooled := p.claim(ctx, spec)
	if e == nil {
		if pooled {
			key, _ := classKey(spec)
			for _, c := range p.classes {
				if c.key == key {
					p.counted(c, false)
				}
			}
		}
		return sb, false, pooled
	}
	sb, err := m.claimPooled(ctx, w, spec, replaces, e)
	if err != nil {
		m.log.WarnContext(ctx, "claiming a pooled environment failed, starting cold", KeySandbox, e.id, KeyWorkspace, w.ID, "err", err)
		p.counted(e.class, false)
		go p.discard(e, "claim failed: "+err.Error())
		return sb, false, true
	}
	p.counted(e.class, true)
	return sb, true, true
}

// claimPooled makes e the sandbox of w: the workspace attached, the run
// directory moved to the sandbox's, the record written, the guest
// connection live. On error e is left as it was (minus, perhaps, the
// attached workspace) for the caller to discard.
func (m *Manager) claimPooled(ctx context.Context, w store.Workspace, spec sandbox.Spec, replaces string, e *pooledEnv) (store.Sandbox, error) {
	if err := m.step("pool-attach"); err != nil {
		return store.Sandbox{}, err
	}
	if err := e.class.at.Attach(ctx, e.info, m.FilesPath(w)); err != nil {
		return store.Sandbox{}, err
	}
	specJSON, _ := json.Marshal(spec)
	now := time.Now().UTC()
	sb := store.Sandbox{ID: e.id, Node: m.cfg.NodeID, WorkspaceID: w.ID, Backend: spec.Backend, BackendRef: e.info.Ref, Image: spec.Image, Spec: string(specJSON),
		State: string(sandbox.StateRunning), TokenHash: e.tokenHash, Replaces: replaces,
		CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
	if err := m.step("pool-record"); err != nil {
		return store.Sandbox{}, err
	}
	// The record first: a crash from here on leaves a running sandbox that
	// the next start marks lost and removes, with its directory wherever
	// it is (the pool's is removed whole at every start).
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return store.Sandbox{}, err
	}
	dir := m.sandboxDir(e.id)
	err := os.MkdirAll(filepath.Dir(dir), 0o700)
	if err == nil {
		err = os.Rename(e.dir, dir)
	}
	if err != nil {
		m.st.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
		return store.Sandbox{}, fmt.Errorf("pooled sandbox %s: moving its run directory: %w", e.id, err)
	}
	e.dir = dir
	// A pooled sandbox's image started once already: its config reads.
	img, _ := m.imageEnv(ctx, spec, m.FilesPath(w))
	lv := &live{ln: e.ln, conn: e.conn, spec: spec, workspaceID: w.ID, task: w.Task, imageEnv: img}
	m.armLifetime(lv, sb.ID)
	m.liveMu.Lock()
	m.live[sb.ID] = lv
	m.liveMu.Unlock()
	m.event(ctx, store.Event{Type: "sandbox.created", WorkspaceID: w.ID, SandboxID: sb.ID},
		map[string]any{"backend": spec.Backend, "image": spec.Image, "ref": e.info.Ref, "replaces": replaces, "warm_pool": "hit"})
	m.log.InfoContext(ctx, "sandbox created from the warm pool", KeySandbox, sb.ID, KeyWorkspace, w.ID, "backend", spec.Backend)
	return sb, nil
}
