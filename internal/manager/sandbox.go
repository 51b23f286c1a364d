package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// KeySandbox is the log key of sandbox IDs.
const KeySandbox = "sandbox_id"

// live is the daemon's side of a running sandbox: the socket its guest
// dialed and the connection on it.
type live struct {
	ln   *guest.Listener
	conn *guest.Conn
	// egress serves the sandbox's egress socket; nil without network.
	egress *egressServer
	// spec is what the sandbox was started with; workspaceID its workspace.
	spec        sandbox.Spec
	workspaceID string
	// task is the workspace's task label, copied onto what it meters.
	task string
	// placeholders stand for the policy's secrets in every command's
	// environment.
	placeholders map[string]string
	// imageEnv is what the image gives every command: its ENV, where the
	// environment starts, and its WORKDIR (see execRequest).
	imageEnv imageRun
	// inflight counts the commands picked to run here and not yet ended:
	// a sandbox with any is not idle.
	inflight atomic.Int64
	// expiry stops the sandbox at the end of its lifetime; nil: none.
	expiry *time.Timer
	// ports are the sandbox's published ports (ports.go).
	ports portSet
}

// done ends one command's claim on the sandbox.
func (l *live) done() { l.inflight.Add(-1) }

func (l *live) alive() bool {
	select {
	case <-l.conn.Done():
		return false
	default:
		return true
	}
}

func (l *live) close() {
	if l.expiry != nil {
		l.expiry.Stop()
	}
	// The listener first: a guest whose connection drops dials again at
	// once, and would be refused, as a second hello, by a listener still
	// open.
	l.ln.Close()
	l.conn.Close()
	l.egress.close()
	l.ports.closeAll()
}

func (m *Manager) sandboxDir(id string) string { return filepath.Join(m.cfg.DataDir, "sandboxes", id) }

func (m *Manager) backend(name string) (sandbox.Backend, error) {
	if b, ok := m.cfg.Backends[name]; ok {
		return b, nil
	}
	if why, ok := m.cfg.Unavailable[name]; ok {
		return nil, fmt.Errorf("backend %q is unavailable on this daemon: %s: %w", name, why, errdefs.ErrUnavailable)
	}
	known := slices.Sorted(maps.Keys(m.cfg.Backends))
	return nil, sandbox.ErrNoBackend(name, known)
}

// specFor completes a caller's spec with the daemon's defaults.
func (m *Manager) specFor(spec sandbox.Spec) (sandbox.Spec, error) {
	if spec.Backend == "" {
		spec.Backend = m.cfg.DefaultBackend
	}
	if spec.Image == "" {
		spec.Image = m.cfg.DefaultImage
	}
	spec, err := m.applyPolicy(spec)
	if err != nil {
		return spec, err
	}
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	_, err = m.backend(spec.Backend)
	return spec, err
}

// applyPolicy checks a spec's policy against the daemon's ceilings and
// makes the policy's limits the spec's.
func (m *Manager) applyPolicy(spec sandbox.Spec) (sandbox.Spec, error) {
	p := spec.Policy
	if p == nil {
		return spec, nil
	}
	c := policy.DefaultCeilings()
	if m.cfg.Ceilings != nil {
		c = *m.cfg.Ceilings
	}
	if err := p.Validate(c); err != nil {
		return spec, err
	}
	// Refused rather than ignored: a caller who asks for a protection
	// must not believe it has one.
	if p.RuntimeClass != "" && spec.Backend != "kubernetes" {
		return spec, errdefs.Invalid("policy runtime_class %q: only the kubernetes backend has runtime classes, this sandbox is on %s", p.RuntimeClass, spec.Backend)
	}
	if len(p.Secrets) > 0 && (m.cfg.Secrets == nil || m.cfg.Intercept == nil) {
		return spec, errdefs.Invalid("policy secrets: this daemon has no secret store or cannot swap secrets in")
	}
	l := p.Limits
	if l.CPUs > 0 {
		spec.Limits.CPUs = l.CPUs
	}
	if l.Memory > 0 {
		spec.Limits.MemoryBytes = int64(l.Memory)
	}
	if l.Pids > 0 {
		spec.Limits.Pids = l.Pids
	}
	if l.Tmp > 0 {
		spec.Limits.TmpBytes = int64(l.Tmp)
	}
	if l.SandboxTimeout > 0 {
		spec.Lifetime = time.Duration(l.SandboxTimeout)
	}
	return spec, nil
}

// diskFits checks a policy's limits.disk against the workspace's quota,
// which is what enforces it: the sandbox may add at most the quota to its
// workspace, so a quota above the limit (or none) cannot honour it. Quotas
// are set when a workspace is made, not changed by a sandbox.
func diskFits(spec sandbox.Spec, w store.Workspace) error {
	if spec.Policy == nil || spec.Policy.Limits.Disk <= 0 {
		return nil
	}
	limit := spec.Policy.Limits.Disk
	if w.DiskQuota <= 0 {
		return errdefs.Invalid("policy limits.disk %s: workspace %s has no disk quota; make the workspace with one (ws create --disk %s)", limit, w.ID, limit)
	}
	if w.DiskQuota > int64(limit) {
		return errdefs.Invalid("policy limits.disk %s: workspace %s has a disk quota of %s, more than the limit; make the workspace with --disk %s", limit, w.ID, policy.ByteSize(w.DiskQuota), limit)
	}
	return nil
}

// imageRun is what a sandbox's image gives each command.
type imageRun struct {
	// env is the image's ENV, with USER, LOGNAME and HOME of its USER's
	// account where the ENV sets none (see Manager.imageEnv).
	env []string
	// workdir is the image's WORKDIR: where a command that names no
	// directory starts. Empty: guest.DefaultWorkdir.
	workdir string
}

// imageEnv reads what a sandbox's image gives each command, as its
// backend reads the image; files is the host path of the workspace's
// files. A bad image (ErrInvalid: a USER its own passwd lacks, a corrupt
// image named by path) is an error, which refuses the sandbox; an image
// whose config cannot be read otherwise gives nothing (a warning): its
// commands still get the default PATH, HOME and directory.
//
// A sandbox never runs a command as root or as another uid than the
// sandbox user's (Config.UID, which owns the workspace's files), on any
// backend. An image USER that is root or unset means the sandbox user.
// A non-root USER, resolved in the image's own /etc/passwd, gives its
// commands the account's name as USER and LOGNAME, and its home as HOME
// when that home is one commands can write (see writableHome); when its
// uid is not the sandbox user's, that is logged, and the uid stays the
// sandbox user's: a command as another uid could not write the workspace.
func (m *Manager) imageEnv(ctx context.Context, spec sandbox.Spec, files string) (imageRun, error) {
	be, err := m.backend(spec.Backend)
	if err != nil {
		return imageRun{}, nil
	}
	in, ok := be.(sandbox.ImageInspector)
	if !ok {
		return imageRun{}, nil
	}
	cfg, err := in.ImageConfig(ctx, spec.Image)
	if errors.Is(err, errdefs.ErrInvalid) {
		// A bad image (a USER its passwd lacks, a corrupt path image):
		// the engine would not run it either.
		return imageRun{}, err
	}
	if err != nil {
		m.log.WarnContext(ctx, "reading the image's config: commands get the default PATH, HOME and directory", "backend", spec.Backend, "image", spec.Image, "err", err)
		return imageRun{}, nil
	}
	var env envList
	for _, e := range cfg.Env {
		env.set(e)
	}
	if a := cfg.Account; a != nil {
		if a.Name != "" {
			for _, k := range []string{"USER", "LOGNAME"} {
				if !env.has(k) {
					env.set(k + "=" + a.Name)
				}
			}
		}
		if !env.has("HOME") && writableHome(a.Home, files) {
			env.set("HOME=" + path.Clean(a.Home))
		}
		if a.UID != m.cfg.UID {
			m.log.InfoContext(ctx, "the image's USER is not the sandbox user: commands run as the sandbox user, with the image user's name and home", "image", spec.Image,
				"image_user", cfg.User, "image_uid", a.UID, "sandbox_uid", m.cfg.UID)
		}
	}
	run := imageRun{env: env.list}
	if wd := cfg.WorkingDir; wd != "" && path.IsAbs(wd) {
		run.workdir = path.Clean(wd)
	}
	return run, nil
}

// writableHome reports whether a command can use home as HOME: the root
// file system is read-only on every backend, so only a home under /tmp
// (which the guest makes on first use, see sandbox.DefaultHome) or an
// existing directory of the workspace (files, owned by the sandbox user)
// qualifies.
func writableHome(home, files string) bool {
	if home == "" || !path.IsAbs(home) {
		return false
	}
	home = path.Clean(home)
	if strings.HasPrefix(home, "/tmp/") {
		return true
	}
	rel, ok := strings.CutPrefix(home, sandbox.WorkspaceDir)
	if !ok || (rel != "" && rel[0] != '/') || files == "" {
		return false
	}
	rel = strings.TrimPrefix(rel, "/")
	if rel == "" {
		return true
	}
	root, err := os.OpenRoot(files)
	if err != nil {
		return false
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	return err == nil && fi.IsDir()
}

// execRequest completes a command's request. Its environment is, in order
// of precedence from low to high: the image's ENV (PATH, HOME, language
// variables), with sandbox.DefaultPath and sandbox.DefaultHome where the
// image sets none; what the sandbox's policy implies (proxy variables when
// it has egress, secret placeholders and the CA bundle); the policy's env;
// the request's own. Nothing comes from the daemon's environment. A
// request that names no directory starts in the image's WORKDIR. It also
// applies the policy's per-exec caps.
func execRequest(spec sandbox.Spec, req guest.ExecRequest, placeholders map[string]string, image imageRun) guest.ExecRequest {
	var env envList
	for _, e := range image.env {
		env.set(e)
	}
	if req.Dir == "" {
		req.Dir = image.workdir
	}
	if !env.has("PATH") {
		env.set("PATH=" + sandbox.DefaultPath)
	}
	if !env.has("HOME") {
		env.set("HOME=" + sandbox.DefaultHome)
	}
	if req.TTY && !env.has("TERM") {
		// A terminal's programs need to know what it understands; the
		// policy and the request may say otherwise.
		env.set("TERM=" + DefaultTERM)
	}
	if spec.Egress() {
		for _, e := range proxyEnv() {
			env.set(e)
		}
	}
	if len(placeholders) > 0 {
		for _, k := range slices.Sorted(maps.Keys(placeholders)) {
			env.set(k + "=" + placeholders[k])
		}
		for _, k := range caEnv {
			env.set(k + "=" + caBundlePath)
		}
	}
	if p := spec.Policy; p != nil {
		for _, k := range slices.Sorted(maps.Keys(p.Env)) {
			env.set(k + "=" + p.Env[k])
		}
		if t := time.Duration(p.Limits.ExecTimeout); t > 0 && (req.Timeout <= 0 || req.Timeout > t) {
			req.Timeout = t
		}
		if o := int64(p.Limits.OutputBytes); o > 0 && (req.MaxOutputBytes <= 0 || req.MaxOutputBytes > o) {
			req.MaxOutputBytes = o
		}
	}
	for _, e := range req.Env {
		env.set(e)
	}
	req.Env = env.list
	return req
}

// envList is an environment in which a later entry replaces an earlier one
// of the same name, in place.
type envList struct {
	list []string
	at   map[string]int
}

func (l *envList) set(e string) {
	k, _, _ := strings.Cut(e, "=")
	if l.at == nil {
		l.at = map[string]int{}
	}
	if i, ok := l.at[k]; ok {
		l.list[i] = e
		return
	}
	l.at[k] = len(l.list)
	l.list = append(l.list, e)
}

func (l *envList) has(k string) bool { _, ok := l.at[k]; return ok }

// CreateSandbox starts a sandbox for workspace wsID. A workspace has at
// most one running sandbox.
func (m *Manager) CreateSandbox(ctx context.Context, wsID string, spec sandbox.Spec) (store.Sandbox, error) {
	w, _, err := m.ready(ctx, wsID)
	if err != nil {
		return store.Sandbox{}, err
	}
	if spec, err = m.specFor(spec); err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
		return store.Sandbox{}, err
	}
	// Asked for, refused or not: an exec that has to start a sandbox on this
	// workspace uses this spec (or fails with the reason), never another
	// backend's default. Bad input (above) changes nothing.
	if b, merr := json.Marshal(spec); merr == nil {
		if serr := m.st.SetWorkspaceSandboxSpec(ctx, wsID, string(b)); serr != nil {
			return store.Sandbox{}, serr
		}
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	l := m.lock("sb:" + wsID)
	l.Lock()
	defer l.Unlock()
	if cur, ok := m.current(ctx, wsID); ok {
		return cur, fmt.Errorf("workspace %s already has sandbox %s: %w", wsID, cur.ID, errdefs.ErrConflict)
	}
	return m.startSandbox(ctx, w, spec, "")
}

// current returns the workspace's running sandbox whose guest is connected.
func (m *Manager) current(ctx context.Context, wsID string) (store.Sandbox, bool) {
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: wsID, State: string(sandbox.StateRunning)})
	if err != nil {
		return store.Sandbox{}, false
	}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	for _, sb := range sbs {
		if lv, ok := m.live[sb.ID]; ok && lv.alive() {
			return sb, true
		}
	}
	return store.Sandbox{}, false
}

func (m *Manager) startSandbox(ctx context.Context, w store.Workspace, spec sandbox.Spec, replaces string) (_ store.Sandbox, err error) {
	// Every start is observed, an explicit create or a replacement.
	if o := m.cfg.Observer; o != nil {
		start := time.Now()
		defer func() { o.ObserveCreate(spec.Backend, time.Since(start), err) }()
	}
	be, err := m.backend(spec.Backend)
	if err != nil {
		return store.Sandbox{}, err
	}
	if err := diskFits(spec, w); err != nil {
		return store.Sandbox{}, err
	}
	img, err := m.imageEnv(ctx, spec, m.FilesPath(w))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox image %s: %w", spec.Image, err)
	}
	if m.cfg.GuestBinary == "" {
		return store.Sandbox{}, fmt.Errorf("no agentbox-guest binary configured: %w", errdefs.ErrUnavailable)
	}
	created := map[string]any{"backend": spec.Backend, "image": spec.Image, "replaces": replaces}
	if sb, ok, pooled := m.fromPool(ctx, w, spec, replaces); ok {
		return sb, nil
	} else if pooled {
		created["warm_pool"] = "miss"
	}
	token, err := guest.NewToken()
	if err != nil {
		return store.Sandbox{}, err
	}
	specJSON, _ := json.Marshal(spec)
	sum := sha256.Sum256([]byte(token))
	now := time.Now().UTC()
	sb := store.Sandbox{ID: ids.New("sb"), Node: m.cfg.NodeID, WorkspaceID: w.ID, Backend: spec.Backend, Image: spec.Image, Spec: string(specJSON),
		State: string(sandbox.StateCreating), TokenHash: hex.EncodeToString(sum[:]), Replaces: replaces,
		CreatedAt: now, UpdatedAt: now, LastActivityAt: now}
	dir := m.sandboxDir(sb.ID)
	runDir := filepath.Join(dir, "run")
	// Until the sandbox is live (or rolled back) the reconciler leaves
	// its row, directory and environment alone.
	defer m.hold(sb.ID)()

	var undo cleanup
	defer undo.run()
	bg := context.WithoutCancel(ctx)
	if err := m.st.CreateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	undo.add(func() { m.st.DeleteSandbox(bg, sb.ID) })
	defer func() {
		if err != nil {
			m.event(bg, store.Event{Type: "sandbox.create_failed", WorkspaceID: w.ID, SandboxID: sb.ID},
				map[string]any{"backend": spec.Backend, "image": spec.Image, "replaces": replaces, "error": err.Error()})
		}
	}()
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	undo.add(func() { os.RemoveAll(dir) })
	if err := m.ownRunDir(runDir); err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	hid := m.hideHostPaths(ctx, dir, runDir)
	undo.add(hid.detach)
	if err := m.step("sandbox-listen"); err != nil {
		return sb, err
	}
	ln, err := guest.Listen(filepath.Join(runDir, "agentbox.sock"), token, m.listenOptions(sb.ID, w.ID))
	if err != nil {
		return sb, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	undo.add(func() { ln.Close() })
	if err := m.step("sandbox-backend"); err != nil {
		return sb, err
	}
	guestEnv := []string{guest.TokenEnv + "=" + token}
	var eg *egressServer
	var placeholders map[string]string
	if spec.Egress() {
		if err := m.step("sandbox-egress"); err != nil {
			return sb, err
		}
		allow, ph, err := m.bindSecrets(ctx, spec, spec.Policy)
		if err != nil {
			return sb, err
		}
		placeholders = ph
		if len(ph) > 0 {
			if err := os.WriteFile(filepath.Join(runDir, caBundleName), m.cfg.CABundle, 0o644); err != nil {
				return sb, fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
		}
		if eg, err = m.serveEgress(sb, runDir, allow); err != nil {
			return sb, err
		}
		undo.add(eg.close)
		guestEnv = append(guestEnv, guest.ProxyEnv+"="+guest.DefaultProxyAddr)
	}
	info, err := be.Create(ctx, sandbox.CreateRequest{
		ID: sb.ID, WorkspaceID: w.ID, Files: m.FilesPath(w), RunDir: runDir,
		Guest: hid.guest, GuestEnv: guestEnv,
		UID: m.cfg.UID, GID: m.cfg.GID, GuestUID: m.cfg.GuestUID, GuestGID: m.cfg.GuestGID, Spec: spec, Owner: m.owner(),
	})
	if err != nil {
		return sb, fmt.Errorf("creating sandbox %s on %s: %w", sb.ID, spec.Backend, err)
	}
	// The environment holds its copies of the run directory and the
	// guest now: off the host with them, while the guest starts.
	go hid.detach()
	undo.add(func() { be.Remove(bg, info.Ref) })
	if err := m.step("sandbox-guest"); err != nil {
		return sb, err
	}
	timeout := m.cfg.GuestConnectTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	conn, err := ln.Accept(actx)
	cancel()
	if err != nil {
		why := "the guest did not connect"
		if in, ierr := be.Inspect(bg, info.Ref); ierr == nil && in.State != sandbox.StateRunning {
			why = "the environment stopped before its guest connected"
		}
		return sb, fmt.Errorf("sandbox %s on %s: %s within %s: %w", sb.ID, spec.Backend, why, timeout, errdefs.ErrUnavailable)
	}
	hid.detach()
	sb.State, sb.BackendRef, sb.UpdatedAt = string(sandbox.StateRunning), info.Ref, time.Now().UTC()
	created["ref"] = info.Ref
	ev := eventRecord(ctx, store.Event{Type: "sandbox.created", WorkspaceID: w.ID, SandboxID: sb.ID}, created)
	if _, err := m.st.UpdateSandboxEvent(ctx, sb, ev); err != nil {
		conn.Close()
		return sb, err
	}
	undo.release()
	lv := &live{ln: ln, conn: conn, egress: eg, spec: spec, workspaceID: w.ID, task: w.Task, placeholders: placeholders, imageEnv: img}
	m.armLifetime(lv, sb.ID)
	m.liveMu.Lock()
	m.live[sb.ID] = lv
	m.liveMu.Unlock()
	m.log.InfoContext(ctx, "sandbox created", KeySandbox, sb.ID, KeyWorkspace, w.ID, "backend", spec.Backend)
	return sb, nil
}

// ownRunDir gives a sandbox's run directory to the user who must reach
// the daemon's sockets in it. With a guest user of its own, that user owns
// it, mode 0711: commands, which run as the sandbox user, can neither list
// it nor connect to the sockets in it (mode 0600, the guest's), yet can
// read the CA bundle there by its name. Without, the sandbox user owns
// it, as the guest runs as that user.
func (m *Manager) ownRunDir(dir string) error {
	switch {
	case m.cfg.GuestUID > 0:
		if err := os.Chown(dir, m.cfg.GuestUID, m.cfg.GuestGID); err != nil {
			return err
		}
		return os.Chmod(dir, 0o711)
	case m.cfg.UID >= 0:
		return os.Chown(dir, m.cfg.UID, m.cfg.GID)
	}
	return nil
}

// socketOwner owns the daemon's sockets in a run directory: the guest's
// own user, or nil when the guest has none.
func (m *Manager) socketOwner() *guest.Owner {
	if m.cfg.GuestUID > 0 {
		return &guest.Owner{UID: m.cfg.GuestUID, GID: m.cfg.GuestGID}
	}
	return nil
}

// listenOptions are those of the guest socket of sandbox id (of workspace
// wsID, empty for a pooled one): a connection the socket refuses, which
// is not the guest's, is an event in the log (SECURITY.md H44).
func (m *Manager) listenOptions(id, wsID string) guest.ListenOptions {
	return guest.ListenOptions{
		Logger: m.log.With(KeySandbox, id),
		Owner:  m.socketOwner(),
		OnRefused: func(r guest.Refusal) {
			m.event(context.Background(), store.Event{Actor: "sandbox", Type: "guest.refused", WorkspaceID: wsID, SandboxID: id},
				map[string]any{"reason": r.Reason, "peer_pid": r.PeerPID, "peer_uid": r.PeerUID})
		},
	}
}

// GetSandbox returns a sandbox record.
func (m *Manager) GetSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	if strings.TrimSpace(id) == "" {
		return store.Sandbox{}, errdefs.Invalid("sandbox ID is empty")
	}
	return m.st.GetSandbox(ctx, id)
}

// ListSandboxes lists sandboxes, optionally of one workspace.
func (m *Manager) ListSandboxes(ctx context.Context, wsID string) ([]store.Sandbox, error) {
	return m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: wsID})
}

// dropLive forgets and closes the daemon's side of a sandbox.
func (m *Manager) dropLive(id string) {
	m.liveMu.Lock()
	lv, ok := m.live[id]
	delete(m.live, id)
	m.liveMu.Unlock()
	if ok {
		lv.close()
	}
}

// StopSandbox ends a sandbox's environment; its record stays (stopped).
// The next exec on its workspace starts a new one.
func (m *Manager) StopSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := m.GetSandbox(ctx, id)
	if err != nil {
		return sb, err
	}
	if err := m.ownSandbox(ctx, sb); err != nil {
		return sb, err
	}
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	if err := m.teardown(ctx, &sb, sandbox.StateStopped); err != nil {
		return sb, err
	}
	m.event(ctx, store.Event{Type: "sandbox.stopped", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}, nil)
	return sb, nil
}

// teardown removes the environment and the run directory and sets state.
func (m *Manager) teardown(ctx context.Context, sb *store.Sandbox, state sandbox.State) error {
	m.dropLive(sb.ID)
	m.recordCgroupUsage(ctx, *sb)
	if sb.BackendRef != "" {
		if be, err := m.backend(sb.Backend); err == nil {
			if err := be.Remove(ctx, sb.BackendRef); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return fmt.Errorf("removing sandbox %s: %w", sb.ID, err)
			}
		}
	}
	os.RemoveAll(m.sandboxDir(sb.ID))
	sb.State, sb.UpdatedAt = string(state), time.Now().UTC()
	return m.st.UpdateSandbox(ctx, *sb)
}

// RemoveSandbox ends a sandbox and deletes its record.
func (m *Manager) RemoveSandbox(ctx context.Context, id string) error {
	sb, err := m.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	if err := m.ownSandbox(ctx, sb); err != nil {
		return err
	}
	l := m.lock("sb:" + sb.WorkspaceID)
	l.Lock()
	defer l.Unlock()
	return m.removeSandboxLocked(ctx, sb)
}

func (m *Manager) removeSandboxLocked(ctx context.Context, sb store.Sandbox) error {
	if err := m.teardown(ctx, &sb, sandbox.StateStopped); err != nil {
		return err
	}
	if err := m.st.DeleteSandbox(ctx, sb.ID); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "sandbox.removed", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}, nil)
	return nil
}

// removeWorkspaceSandboxes deletes every sandbox of a workspace (before the
// workspace itself goes).
func (m *Manager) removeWorkspaceSandboxes(ctx context.Context, wsID string) error {
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: wsID})
	if err != nil {
		return err
	}
	l := m.lock("sb:" + wsID)
	l.Lock()
	defer l.Unlock()
	for _, sb := range sbs {
		if err := m.removeSandboxLocked(ctx, sb); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}

// ExecOutcome is the result of an exec and where it ran.
type ExecOutcome struct {
	guest.ExecResult
	// ExecID is the exec's record.
	ExecID string `json:"exec_id"`
	// SandboxID is the sandbox it ran in.
	SandboxID string `json:"sandbox_id"`
	// Replaced says the workspace's sandbox was gone and a new one was
	// started with its last spec to run this command.
	Replaced bool `json:"replaced"`
	// OOMKilled says the command (or, on gVisor, its whole sandbox) was
	// killed for exceeding the memory limit.
	OOMKilled bool `json:"oom_killed"`
}

// Exec runs a command in the sandbox of target (a workspace or sandbox
// ID). When that sandbox is gone (removed from outside, crashed, stopped,
// or the daemon restarted), a new one with the same spec is started and
// the outcome says Replaced; the workspace is untouched.
func (m *Manager) Exec(ctx context.Context, target string, req guest.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecOutcome, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return ExecOutcome{}, errdefs.Invalid("exec: the command is empty")
	}
	wsID, err := m.targetWorkspace(ctx, target)
	if err != nil {
		return ExecOutcome{}, err
	}
	out, err := m.execOnce(ctx, wsID, req, stdin, stdout, stderr)
	if errors.Is(err, guest.ErrNotSent) {
		// The sandbox died between its last check and this command, which
		// never reached it (so never ran, and read no input): the dead
		// sandbox is marked lost with this exec, and the command runs in
		// a new one, which the outcome says.
		out, err = m.execOnce(ctx, wsID, req, stdin, stdout, stderr)
		out.Replaced = true
	}
	return out, err
}

// execOnce runs req in the workspace's sandbox, starting one if needed.
func (m *Manager) execOnce(ctx context.Context, wsID string, req guest.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecOutcome, error) {
	sb, lv, replaced, err := m.ensureSandbox(ctx, wsID)
	if err != nil {
		return ExecOutcome{}, err
	}
	defer lv.done()
	rec, err := m.beginExec(ctx, sb, lv.task, req.Argv)
	if err != nil {
		return ExecOutcome{}, err
	}
	ctx = logx.With(ctx, KeyWorkspace, wsID, KeySandbox, sb.ID, KeyExec, rec.ID)
	req = execRequest(lv.spec, req, lv.placeholders, lv.imageEnv)
	le := m.execs.begin(rec, req.Argv)
	stdout, stderr = le.teeOutput(stdout, stderr)
	oom := m.watchOOM(ctx, sb)
	start := time.Now()
	res, err := lv.conn.Exec(ctx, req, stdin, stdout, stderr)
	took := time.Since(start)
	out := ExecOutcome{ExecResult: res, ExecID: rec.ID, SandboxID: sb.ID, Replaced: replaced}
	out.OOMKilled = m.oomKilled(context.WithoutCancel(ctx), oom, sb, rec.ID, res)
	if o := m.cfg.Observer; o != nil {
		o.ObserveExec(sb.Backend, took, outcomeOf(res, out.OOMKilled, err))
	}
	rec.OOM = out.OOMKilled
	rec = m.endExec(context.WithoutCancel(ctx), sb, rec, res, err)
	m.execs.end(le, rec)
	var se *guest.StartError
	switch {
	case errors.As(err, &se):
		// The command cannot start as asked (no such program, a missing
		// working directory): the request's fault, not the daemon's.
		return out, fmt.Errorf("exec in sandbox %s: %w: %w", sb.ID, err, errdefs.ErrInvalid)
	case err != nil:
		return out, fmt.Errorf("exec in sandbox %s: %w", sb.ID, err)
	}
	return out, nil
}

// outcomeOf classifies an exec's end for an Observer. err is what the
// guest connection returned: the command was cut short.
func outcomeOf(res guest.ExecResult, oom bool, err error) string {
	switch {
	case res.Lost:
		return OutcomeLost
	case oom:
		return OutcomeOOM
	case res.TimedOut:
		return OutcomeTimeout
	case err != nil, res.Canceled, res.Signal != 0:
		return OutcomeKilled
	case res.ExitCode != 0:
		return OutcomeNonZero
	}
	return OutcomeOK
}

// ensureSandbox returns the workspace's live sandbox, replacing it when it
// is gone.
func (m *Manager) ensureSandbox(ctx context.Context, wsID string) (store.Sandbox, *live, bool, error) {
	w, _, err := m.ready(ctx, wsID)
	if err != nil {
		return store.Sandbox{}, nil, false, err
	}
	l := m.lock("sb:" + wsID)
	l.Lock()
	defer l.Unlock()
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{WorkspaceID: wsID})
	if err != nil {
		return store.Sandbox{}, nil, false, err
	}
	var last *store.Sandbox
	for i := range sbs {
		sb := sbs[i]
		last = &sbs[i]
		if sb.State != string(sandbox.StateRunning) {
			continue
		}
		m.liveMu.Lock()
		lv, ok := m.live[sb.ID]
		m.liveMu.Unlock()
		if ok && lv.alive() {
			// Claimed under the lock, so that eviction, which takes it
			// too, never stops a sandbox a command was just given.
			lv.inflight.Add(1)
			return sb, lv, false, nil
		}
		m.markLost(ctx, sb, "guest connection gone")
	}
	var spec sandbox.Spec
	replaces := ""
	if last != nil {
		if err := json.Unmarshal([]byte(last.Spec), &spec); err != nil {
			return store.Sandbox{}, nil, false, fmt.Errorf("sandbox %s: reading its spec: %w", last.ID, err)
		}
		replaces = last.ID
	}
	// The spec last asked for on the workspace wins over the last sandbox's:
	// after a refused create it is what the caller wants, and the exec uses it
	// or fails with the reason.
	askedSpec, err := m.st.WorkspaceSandboxSpec(ctx, wsID)
	if err != nil {
		return store.Sandbox{}, nil, false, err
	}
	asked := askedSpec != ""
	if asked {
		spec = sandbox.Spec{}
		if err := json.Unmarshal([]byte(askedSpec), &spec); err != nil {
			return store.Sandbox{}, nil, false, fmt.Errorf("workspace %s: reading the sandbox spec last asked for: %w", wsID, err)
		}
	}
	if spec, err = m.specFor(spec); err != nil {
		if asked {
			err = fmt.Errorf("workspace %s: the sandbox asked for (backend %s, image %s) cannot start: %w", wsID, spec.Backend, spec.Image, err)
		}
		return store.Sandbox{}, nil, false, err
	}
	sb, err := m.startSandbox(ctx, w, spec, replaces)
	if err != nil {
		return sb, nil, false, err
	}
	m.liveMu.Lock()
	lv := m.live[sb.ID]
	m.liveMu.Unlock()
	lv.inflight.Add(1)
	return sb, lv, replaces != "", nil
}

// markLost records that a sandbox's environment is gone (or unreachable)
// and removes what is left of it.
func (m *Manager) markLost(ctx context.Context, sb store.Sandbox, why string) {
	if err := m.teardown(ctx, &sb, sandbox.StateLost); err != nil {
		m.log.WarnContext(ctx, "tearing down a lost sandbox", KeySandbox, sb.ID, "err", err)
	}
	m.event(ctx, store.Event{Actor: "daemon", Type: "sandbox.lost", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}, map[string]any{"reason": why})
}

// recoverSandboxes runs at start: no guest is connected to a new daemon,
// so every sandbox a previous run left is torn down and marked lost (or,
// if it was still being created, deleted). The next exec on its workspace
// starts a new one; the workspace itself is untouched.
func (m *Manager) recoverSandboxes(ctx context.Context) {
	m.detachLeftovers(ctx)
	sbs, err := m.st.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		m.log.ErrorContext(ctx, "listing sandboxes at start", "err", err)
		return
	}
	for _, sb := range sbs {
		if !m.mine(sb.Node) {
			continue // another node's, running there
		}
		switch sandbox.State(sb.State) {
		case sandbox.StateCreating:
			m.teardown(ctx, &sb, sandbox.StateLost)
			m.st.DeleteSandbox(ctx, sb.ID)
			m.event(ctx, store.Event{Actor: "daemon", Type: "sandbox.rolled_back", WorkspaceID: sb.WorkspaceID, SandboxID: sb.ID}, nil)
			m.countRepair(RepairSandboxRolledBack)
		case sandbox.StateRunning:
			m.markLost(ctx, sb, "daemon restarted")
			m.countRepair(RepairSandboxLost)
			m.loseExecs(ctx, sb)
		}
	}
}

// loseExecs ends the exec rows of sb that still say running: a new daemon
// runs no command, so those were cut short by the crash of the last one.
func (m *Manager) loseExecs(ctx context.Context, sb store.Sandbox) {
	execs, err := m.st.ListExecs(ctx, store.ExecFilter{SandboxID: sb.ID})
	if err != nil {
		m.log.WarnContext(ctx, "listing the execs of a lost sandbox", KeySandbox, sb.ID, "err", err)
		return
	}
	for _, x := range execs {
		if x.State != store.ExecRunning {
			continue
		}
		x.State, x.ExitCode, x.FinishedAt = store.ExecLost, -1, time.Now().UTC()
		x.WallNanos = int64(x.FinishedAt.Sub(x.StartedAt))
		ev := execEvent(ctx, x, errors.New("the daemon restarted while it ran"))
		ev.Actor = "daemon"
		if _, err := m.st.FinishExecEvent(ctx, x, ev); err != nil {
			m.log.WarnContext(ctx, "ending the exec of a lost sandbox", KeySandbox, sb.ID, KeyExec, x.ID, "err", err)
		}
	}
}
