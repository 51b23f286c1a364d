package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/seccomp"
)

// Log keys.
const (
	logSandbox = "sandbox_id"
	logBackend = "backend"
)

const (
	// startTimeout bounds Create from bubblewrap's start to the guest's
	// exec when the caller's context has no earlier deadline.
	startTimeout = 30 * time.Second
	// killTimeout bounds the wait for a killed sandbox's last process.
	killTimeout = 10 * time.Second
	// logTail is how much of bubblewrap's and the guest's output is kept.
	logTail = 64 << 10
)

// Backend runs sandboxes as bubblewrap jails on this host.
type Backend struct {
	opts     Options
	log      *slog.Logger
	bwrap    string
	cg       *cgroups
	filter   []byte
	masks    []string
	stageDir string
	sp       *spawner
	locks    idLocks
	// rootWarn logs once that roots are binds (see staged.rootBound).
	rootWarn sync.Once
	// noAttach, when set, says why this backend cannot pool jails (see
	// pool_linux.go); it wraps sandbox.ErrNoAttach.
	noAttach error

	mu    sync.Mutex
	jails map[string]*jail // started by this Backend
	// holds are the collector locks on the root file systems sandboxes
	// run from (see holdImage), by sandbox id.
	holds  map[string]*image.Hold
	closed bool
}

// jail is a sandbox this Backend started and still tracks.
type jail struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed once bubblewrap's monitor is reaped
	log     *tail
	logDone chan struct{} // closed when every writer of the log is gone
	timer   *time.Timer   // the lifetime, if any
	// unstaged is closed once the stage binds, which the jail no longer
	// needs once it runs the guest, are gone (see Create).
	unstaged chan struct{}
	// pooled says the jail was started for a warm pool; attached, that
	// its workspace was attached (guarded by Backend.mu).
	pooled, attached bool
}

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Pauser  = (*Backend)(nil)
)

// New checks the host (root, bubblewrap, user namespaces, cgroups) and
// returns a backend. Close releases it.
func New(opts Options) (*Backend, error) {
	fail := func(format string, args ...any) (*Backend, error) {
		return nil, fmt.Errorf("local backend: "+format, args...)
	}
	if os.Geteuid() != 0 {
		return fail("needs root (cgroups, mounts): %w", errdefs.ErrUnavailable)
	}
	for _, d := range []struct {
		name string
		p    *string
	}{{"state dir", &opts.StateDir}, {"images dir", &opts.ImagesDir}} {
		if *d.p == "" {
			return fail("no %s: %w", d.name, errdefs.ErrInvalid)
		}
		abs, err := filepath.Abs(*d.p)
		if err != nil {
			return fail("%s %q: %v: %w", d.name, *d.p, err, errdefs.ErrInvalid)
		}
		*d.p = abs
	}
	if opts.ImageCache == "" {
		opts.ImageCache = image.DefaultCache
	}
	if opts.Bwrap == "" {
		opts.Bwrap = "bwrap"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = "agentbox"
	}
	if !validID.MatchString(opts.CgroupParent) {
		return fail("cgroup parent %q is not a plain name: %w", opts.CgroupParent, errdefs.ErrInvalid)
	}
	if opts.StageDir == "" {
		sum := sha256.Sum256([]byte(opts.StateDir))
		opts.StageDir = "/run/agentbox-local-" + hex.EncodeToString(sum[:])[:12]
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	bwrap, err := exec.LookPath(opts.Bwrap)
	if err != nil {
		return fail("bubblewrap %q not found (Debian package bubblewrap): %w", opts.Bwrap, errdefs.ErrUnavailable)
	}
	v, err := bwrapVersion(bwrap)
	if err != nil {
		return fail("%v: %w", err, errdefs.ErrUnavailable)
	}
	if versionLess(v, minBwrap) {
		return fail("bubblewrap %d.%d.%d at %s is older than %d.%d.%d: %w", v[0], v[1], v[2], bwrap, minBwrap[0], minBwrap[1], minBwrap[2], errdefs.ErrUnavailable)
	}
	if err := checkUserns(); err != nil {
		return fail("%v: %w", err, errdefs.ErrUnavailable)
	}
	cg, err := detectCgroups(opts.CgroupRoot, opts.CgroupParent)
	if err != nil {
		return fail("%v: %w", err, errdefs.ErrUnavailable)
	}
	if err := cg.ensureParent(); err != nil {
		return fail("cgroup %s: %v: %w", opts.CgroupParent, err, errdefs.ErrUnavailable)
	}
	// The guest is PID 1 under this filter and signals its own threads
	// (see seccomp.Options); its reapers refuse that to commands.
	filter, err := seccomp.Build(seccomp.Options{ThreadSignals: true})
	if err != nil {
		return fail("%v: %w", err, errdefs.ErrUnavailable)
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return fail("state dir: %w", err)
	}
	if err := checkTraversable(filepath.Dir(opts.StageDir)); err != nil {
		return fail("stage dir %s: %w: %w", opts.StageDir, err, errdefs.ErrInvalid)
	}
	if err := mountStage(opts.StageDir); err != nil {
		return fail("%w", err)
	}
	var home func() ([]string, error)
	if cg.version == cgroupV1 {
		home = func() ([]string, error) {
			rel, err := cg.threadCgroups()
			if err != nil {
				return nil, err
			}
			var dirs []string
			for _, h := range cg.hiers {
				dirs = append(dirs, filepath.Join(h, rel[h]))
			}
			return dirs, nil
		}
	}
	sp, err := newSpawner(home, func() error { return enterSmallNamespace(opts.StageDir, opts.CgroupRoot, bwrap) })
	if err == nil {
		err = sp.check(bwrap)
		if err != nil {
			sp.close()
		}
	}
	var noAttach error
	if err != nil {
		// A bubblewrap whose libraries live elsewhere (a Nix store), or a
		// host that refuses the pivot: start it from the daemon's own
		// namespace, as fast as the host's mount table allows. Jails are
		// then not pooled: whether a mount on the stage still reaches
		// them depends on what the host's namespace does.
		opts.Logger.Warn("local backend: starting bubblewrap from the daemon's mount namespace", logBackend, Name, "error", err)
		noAttach = fmt.Errorf("%w: bubblewrap starts from the daemon's mount namespace (%v)", sandbox.ErrNoAttach, err)
		if sp, err = newSpawner(home, nil); err != nil {
			unmountStage(opts.StageDir)
			return fail("%w", err)
		}
	}
	b := &Backend{
		opts:     opts,
		log:      opts.Logger.With(logBackend, Name),
		bwrap:    bwrap,
		cg:       cg,
		filter:   filter.Bytes(),
		masks:    presentProcMasks(),
		stageDir: opts.StageDir,
		sp:       sp,
		noAttach: noAttach,
		jails:    map[string]*jail{},
		holds:    map[string]*image.Hold{},
	}
	b.log.Info("local backend ready", "bwrap", bwrap, "cgroup", cg.version.String(), "state_dir", opts.StateDir)
	return b, nil
}

// checkTraversable checks that every user may pass through dir and its
// ancestors: bubblewrap resolves the stage's paths as the sandbox user.
func checkTraversable(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not traversable by other users (mode %v)", p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

// checkUserns checks that an unprivileged process may create a user
// namespace, which bubblewrap needs to run as the sandbox user.
func checkUserns() error {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("user namespaces are disabled (user.max_user_namespaces = 0)")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return errors.New("unprivileged user namespaces are disabled: sysctl kernel.unprivileged_userns_clone=1")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return errors.New("AppArmor restricts unprivileged user namespaces: give bwrap a profile that allows userns, or sysctl kernel.apparmor_restrict_unprivileged_userns=0")
	}
	return nil
}

// Name is "local".
func (b *Backend) Name() string { return Name }

// CgroupVersion is "v1" or "v2": which cgroup API carries the limits.
func (b *Backend) CgroupVersion() string { return b.cg.version.String() }

// Close kills every sandbox this Backend started (they are bound to its
// spawner thread, see spawner) and unmounts the stage. Records and cgroups
// stay for Remove, or for the reconciler of the next daemon.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	jails := b.jails
	b.mu.Unlock()
	b.sp.close()
	var errs []error
	for id, j := range jails {
		if j.timer != nil {
			j.timer.Stop()
		}
		if err := b.cg.kill(id, killTimeout); err != nil {
			errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
		}
		waitClosed(j.exited, killTimeout)
		waitClosed(j.unstaged, killTimeout)
	}
	if err := unmountStage(b.stageDir); err != nil {
		errs = append(errs, err)
	}
	b.mu.Lock()
	for id, h := range b.holds {
		h.Release()
		delete(b.holds, id)
	}
	b.mu.Unlock()
	return errors.Join(errs...)
}

func waitClosed(ch <-chan struct{}, within time.Duration) bool {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Create starts a jail for req whose guest gets exactly req.GuestEnv as
// its environment: nothing of the daemon's own reaches the sandbox. On
// error nothing of the sandbox is left: no process, cgroup, mount or
// directory.
func (b *Backend) Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Info, error) {
	return b.create(ctx, req, "")
}

// create is Create, or with owner set CreateDetached (see pool_linux.go).
func (b *Backend) create(ctx context.Context, req sandbox.CreateRequest, owner string) (_ sandbox.Info, err error) {
	pooled := owner != ""
	if !validID.MatchString(req.ID) {
		return sandbox.Info{}, errdefs.Invalid("sandbox id %q: want 1-63 letters, digits, '_' or '-'", req.ID)
	}
	fail := func(err error) (sandbox.Info, error) {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	spec := req.Spec.WithDefaults()
	rootfs, err := b.check(ctx, req, spec, pooled)
	if err != nil {
		return fail(err)
	}
	unlock := b.locks.lock(req.ID)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if b.isClosed() {
		return fail(fmt.Errorf("%w: %w", errClosed, errdefs.ErrUnavailable))
	}

	// phases records how long each step took, for the log.
	var phases []any
	last := time.Now()
	phase := func(name string) {
		now := time.Now()
		phases = append(phases, name, now.Sub(last).Round(time.Microsecond).String())
		last = now
	}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if rootfs, err = b.holdImage(ctx, req.ID, spec.Image, rootfs); err != nil {
		return fail(err)
	}
	undo = append(undo, func() { b.releaseImage(req.ID) })
	stateDir := filepath.Join(b.opts.StateDir, req.ID)
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fail(fmt.Errorf("sandbox %s already exists: %w", req.ID, errdefs.ErrConflict))
		}
		return fail(err)
	}
	undo = append(undo, func() { os.RemoveAll(stateDir) })

	phase("state")
	if err := b.cg.create(req.ID, spec.Limits); err != nil {
		return fail(fmt.Errorf("cgroups: %w", err))
	}
	phase("cgroups")
	undo = append(undo, func() {
		if err := b.cg.kill(req.ID, killTimeout); err != nil {
			b.log.Warn("rolling back: killing the jail", logSandbox, req.ID, "error", err)
		}
		if err := b.cg.remove(req.ID); err != nil {
			b.log.Warn("rolling back: removing cgroups", logSandbox, req.ID, "error", err)
		}
	})

	st, err := stage(b.stageDir, req.ID, rootfs, req.Files, req.RunDir, req.Guest, spec.Limits.TmpBytes)
	if err != nil {
		return fail(err)
	}
	if st.rootBound != nil {
		b.rootWarn.Do(func() {
			b.log.Warn("sandboxes will see the host path of their image's root file system in their mount table", "error", st.rootBound)
		})
	}
	staged := true
	unstageNow := func() {
		if staged {
			staged = false
			if err := st.unstage(); err != nil {
				b.log.Warn("unstaging", logSandbox, req.ID, "error", err)
			}
		}
	}
	// In the undo stack, so that a failed create kills the jail before it
	// takes the stage away.
	undo = append(undo, unstageNow)
	phase("stage")

	j, info, err := b.start(ctx, req, st)
	if err != nil {
		return fail(err)
	}
	phase("namespaces")
	undo = append(undo, func() {
		b.cg.kill(req.ID, killTimeout)
		waitClosed(j.exited, killTimeout)
	})

	rec := &record{
		ID:      req.ID,
		Labels:  labels(req, owner),
		Image:   req.Spec.Image,
		Rootfs:  rootfs,
		Spec:    spec,
		UID:     req.UID,
		GID:     req.GID,
		Pid:     info.pid,
		Monitor: j.cmd.Process.Pid,
		Cgroups: b.cg.dirs(req.ID),
		Created: time.Now().UTC(),
	}
	if rec.PidStart, _, err = procStart(info.pid); err != nil {
		// Gone already: bubblewrap failed while setting the jail up.
		waitClosed(j.exited, 5*time.Second)
		waitClosed(j.logDone, time.Second)
		return fail(fmt.Errorf("bubblewrap failed to start the jail: %s", bwrapFailure(j)))
	}
	if err := writeRecord(stateDir, rec); err != nil {
		return fail(fmt.Errorf("writing the sandbox record: %w", err))
	}
	phase("record")
	if err := b.waitExec(ctx, j, info.pid, rec.PidStart); err != nil {
		return fail(err)
	}
	phase("jail")
	if pooled {
		// The pool point stays until Remove (see pool_linux.go).
		if err := st.keepPoolPoint(info.pid); err != nil {
			return fail(err)
		}
		staged = false
		close(j.unstaged)
		j.pooled = true
		phase("pool point")
	} else {
		// The jail holds its own copies now. Taking the stage away is off
		// the path to the guest: Remove and Close wait for it.
		staged = false
		go func() {
			defer close(j.unstaged)
			if err := st.unstage(); err != nil {
				b.log.Warn("unstaging", logSandbox, req.ID, "error", err)
			}
		}()
	}

	b.mu.Lock()
	b.jails[req.ID] = j
	b.mu.Unlock()
	if spec.Lifetime > 0 {
		id := req.ID
		j.timer = time.AfterFunc(spec.Lifetime, func() {
			b.log.Info("sandbox lifetime over: stopping", logSandbox, id, "lifetime", spec.Lifetime)
			if err := b.Stop(context.Background(), id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				b.log.Warn("stopping at the end of its lifetime", logSandbox, id, "error", err)
			}
		})
	}
	b.log.Info("sandbox started", append([]any{logSandbox, req.ID, "pid", info.pid, "image", req.Spec.Image}, phases...)...)
	return b.info(rec), nil
}

// check validates req and returns the image's root file system. Its
// errors are ErrInvalid and change nothing. A detached request (a warm
// pool's) has no workspace yet.
func (b *Backend) check(ctx context.Context, req sandbox.CreateRequest, spec sandbox.Spec, detached bool) (rootfs string, err error) {
	if err := spec.Validate(); err != nil {
		return "", err
	}
	switch {
	case spec.Backend != "" && spec.Backend != Name:
		return "", errdefs.Invalid("spec asks for backend %q, this is %q", spec.Backend, Name)
	case req.WorkspaceID == "" && !detached:
		return "", errdefs.Invalid("no workspace id")
	case detached && (req.WorkspaceID != "" || req.Files != ""):
		return "", errdefs.Invalid("a detached sandbox gets its workspace when it is attached, not at its start")
	case req.UID <= 0 || req.GID <= 0 || req.UID > 1<<31-2 || req.GID > 1<<31-2:
		return "", errdefs.Invalid("uid:gid %d:%d: sandboxes run as a non-root user and group", req.UID, req.GID)
	}
	if err := req.CheckGuestUser(); err != nil {
		return "", err
	}
	rootfs, _, err = b.image(ctx, spec.Image)
	if err != nil {
		return "", err
	}
	for _, p := range []struct {
		what, path string
		dir        bool
	}{{"workspace files", req.Files, true}, {"run dir", req.RunDir, true}, {"guest", req.Guest, false}} {
		if detached && p.what == "workspace files" {
			continue
		}
		if !filepath.IsAbs(p.path) {
			return "", errdefs.Invalid("%s %q is not an absolute path", p.what, p.path)
		}
		fi, err := os.Stat(p.path)
		if err != nil {
			return "", errdefs.Invalid("%s: %v", p.what, err)
		}
		if fi.IsDir() != p.dir || (!p.dir && !fi.Mode().IsRegular()) {
			return "", errdefs.Invalid("%s %s is not a %s", p.what, p.path, map[bool]string{true: "directory", false: "regular file"}[p.dir])
		}
		if strings.HasPrefix(p.path+"/", b.stageDir+"/") {
			return "", errdefs.Invalid("%s %s is inside the stage dir %s", p.what, p.path, b.stageDir)
		}
	}
	// Only the guest's own variables: bubblewrap hands its environment to
	// the guest, and nothing else of the daemon's may reach a sandbox.
	tokens := 0
	for _, e := range req.GuestEnv {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(k, guestEnvPrefix) || strings.IndexByte(e, 0) >= 0 {
			return "", errdefs.Invalid("guest environment entry %q is not %s*=value", k, guestEnvPrefix)
		}
		if k == guest.TokenFDEnv {
			return "", errdefs.Invalid("guest environment entry %s: the backend passes the token's descriptor itself", k)
		}
		if k == guest.TokenEnv {
			tokens++
		}
	}
	if tokens != 1 {
		return "", errdefs.Invalid("%d %s entries in the guest environment, want exactly one: the guest starts with one token", tokens, guest.TokenEnv)
	}
	return rootfs, nil
}

// labels are a sandbox's labels; with a pool owner, a pooled jail's: the
// pool's, and no workspace.
func labels(req sandbox.CreateRequest, poolOwner string) map[string]string {
	l := map[string]string{
		sandbox.LabelManaged: "1",
		sandbox.LabelSandbox: req.ID,
		LabelBackend:         Name,
	}
	if poolOwner == "" {
		l[sandbox.LabelWorkspace] = req.WorkspaceID
	} else {
		l[sandbox.LabelPool] = "1"
		l[sandbox.LabelPoolOwner] = poolOwner
	}
	if req.Owner != "" {
		l[sandbox.LabelOwner] = req.Owner
	}
	return l
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// bwrapInfo is what bubblewrap writes to its info fd.
type bwrapInfo struct {
	pid int
}

// start starts bubblewrap for req inside its cgroups and returns once
// bubblewrap has created the jail's namespaces (its info fd says the
// jail's pid). On error nothing it started is left running.
func (b *Backend) start(ctx context.Context, req sandbox.CreateRequest, st staged) (_ *jail, _ bwrapInfo, err error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			closers = append(closers, r, w)
		}
		return r, w, err
	}
	infoR, infoW, err := pipe()
	if err != nil {
		return nil, bwrapInfo{}, err
	}
	filterR, filterW, err := pipe()
	if err != nil {
		return nil, bwrapInfo{}, err
	}
	// The program is a few hundred bytes: it fits the pipe's buffer, so
	// it is written before bubblewrap reads it.
	if _, err := filterW.Write(b.filter); err != nil {
		return nil, bwrapInfo{}, fmt.Errorf("writing the seccomp program: %w", err)
	}
	filterW.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, bwrapInfo{}, err
	}
	closers = append(closers, logW)

	separate := req.GuestUID != 0
	cmd := exec.Command(b.bwrap, bwrapArgs(jailSpec{
		id: req.ID, st: st, uid: req.UID, gid: req.GID,
		masks: b.masks, guestArgs: req.GuestArgs, separate: separate,
	})...)
	// The token goes in a pipe, the rest of the guest's variables in the
	// environment (check made sure there is exactly one token).
	tokenR, tokenW, err := pipe()
	if err != nil {
		return nil, bwrapInfo{}, err
	}
	cmd.Env = append([]string{guest.TokenFDEnv + "=" + strconv.Itoa(tokenFD)}, req.GuestEnvUsers()...)
	for _, e := range req.GuestEnv {
		if tok, ok := strings.CutPrefix(e, guest.TokenEnv+"="); ok {
			// A token is far smaller than the pipe's buffer.
			if _, err := io.WriteString(tokenW, tok); err != nil {
				return nil, bwrapInfo{}, fmt.Errorf("writing the guest's token: %w", err)
			}
			continue
		}
		cmd.Env = append(cmd.Env, e)
	}
	tokenW.Close()
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logW, logW
	cmd.ExtraFiles = []*os.File{infoW, filterR, tokenR} // fds 3, 4 and 5
	// bubblewrap runs as the sandbox user from the start, so that the
	// jail's user namespace maps that user to itself: files written in
	// /workspace belong to it on the host, and no host root exists inside
	// at all. With a guest user, bubblewrap (and so the guest) runs as
	// that user instead, and the backend maps both (writeUserMaps).
	cred := &syscall.Credential{Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: []uint32{}}
	var usernsW *os.File
	if separate {
		var usernsR *os.File
		if usernsR, usernsW, err = pipe(); err != nil {
			return nil, bwrapInfo{}, err
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, usernsR) // fd 6
		cred = &syscall.Credential{Uid: uint32(req.GuestUID), Gid: uint32(req.GuestGID), Groups: []uint32{}}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		// Its own session: no signal from the daemon's terminal.
		Setsid: true,
	}
	var into []string
	if b.cg.version == cgroupV2 {
		fd, err := unix.Open(b.cg.dir(req.ID, ""), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, bwrapInfo{}, fmt.Errorf("opening cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	} else {
		into = b.cg.dirs(req.ID)
	}
	if err := b.sp.start(cmd, into); err != nil {
		logR.Close()
		if errors.Is(err, errClosed) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
		}
		return nil, bwrapInfo{}, fmt.Errorf("starting bubblewrap: %w", err)
	}
	j := &jail{cmd: cmd, exited: make(chan struct{}), log: newTail(logTail), logDone: make(chan struct{}), unstaged: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(j.exited)
	}()
	go drain(logR, j.log, j.logDone)
	// Only bubblewrap may hold the child ends now: an EOF on the info pipe
	// then means it is gone.
	infoW.Close()
	filterR.Close()
	tokenR.Close()
	logW.Close()
	if separate {
		cmd.ExtraFiles[3].Close()
	}
	defer func() {
		if err != nil {
			cmd.Process.Kill()
			<-j.exited
		}
	}()

	infoc := make(chan []byte, 1)
	go func() {
		data, _ := io.ReadAll(io.LimitReader(infoR, 64<<10))
		infoc <- data
	}()
	t := time.NewTimer(startTimeout)
	defer t.Stop()
	var data []byte
	select {
	case data = <-infoc:
	case <-ctx.Done():
		return nil, bwrapInfo{}, fmt.Errorf("waiting for bubblewrap: %w", ctx.Err())
	case <-t.C:
		return nil, bwrapInfo{}, fmt.Errorf("bubblewrap did not start the jail within %s", startTimeout)
	}
	var raw struct {
		ChildPid int `json:"child-pid"`
	}
	if err := json.Unmarshal(data, &raw); err != nil || raw.ChildPid <= 0 {
		waitClosed(j.exited, 5*time.Second)
		waitClosed(j.logDone, time.Second)
		return nil, bwrapInfo{}, fmt.Errorf("bubblewrap failed: %s", bwrapFailure(j))
	}
	if separate {
		// The jail waits (on fd 6) until its user namespace has maps.
		if err := writeUserMaps(raw.ChildPid, req); err != nil {
			return nil, bwrapInfo{}, fmt.Errorf("mapping the jail's users: %w (bubblewrap: %s)", err, bwrapFailure(j))
		}
		if _, err := usernsW.Write([]byte{1}); err != nil {
			return nil, bwrapInfo{}, fmt.Errorf("releasing bubblewrap: %w", err)
		}
		usernsW.Close()
	}
	return j, bwrapInfo{pid: raw.ChildPid}, nil
}

// writeUserMaps maps the guest's user and group and the commands' to
// themselves in the user namespace of pid, and nothing else: no root, no
// other host user exists inside. Writing more than one mapping takes
// CAP_SETUID and CAP_SETGID in the parent namespace, which is why the
// backend, not bubblewrap (running as the guest user), writes them.
// setgroups stays allowed: the guest drops the supplementary groups of
// the reapers it starts as the commands' user.
func writeUserMaps(pid int, req sandbox.CreateRequest) error {
	line := func(id int) string { return fmt.Sprintf("%d %d 1\n", id, id) }
	uids := line(req.UID) + line(req.GuestUID)
	gids := line(req.GID)
	if req.GuestGID != req.GID {
		gids += line(req.GuestGID)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	for _, m := range []struct{ name, text string }{{"uid_map", uids}, {"gid_map", gids}} {
		// One write each: the kernel takes a map whole or not at all.
		f, err := os.OpenFile(filepath.Join(dir, m.name), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(m.text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	return nil
}

// bwrapFailure describes how bubblewrap ended, with the end of its output.
func bwrapFailure(j *jail) string {
	status := "still running"
	select {
	case <-j.exited:
		status = j.cmd.ProcessState.String()
	default:
	}
	out := strings.TrimSpace(lastLines(j.log.String(), 20))
	if out == "" {
		out = "(no output)"
	}
	return status + ": " + out
}

// waitExec waits until the jail's init has executed the guest, that is
// until bubblewrap has finished setting it up.
func (b *Backend) waitExec(ctx context.Context, j *jail, pid int, start uint64) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	delay := 100 * time.Microsecond
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for the guest to start: %w", err)
		}
		if !alive(pid, start) {
			waitClosed(j.exited, 5*time.Second)
			waitClosed(j.logDone, time.Second)
			return fmt.Errorf("bubblewrap failed to start the jail: %s", bwrapFailure(j))
		}
		if comm, err := procComm(pid); err == nil && comm != "bwrap" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the guest to start: %w", ctx.Err())
		case <-j.exited:
			waitClosed(j.logDone, time.Second)
			return fmt.Errorf("bubblewrap failed: %s", bwrapFailure(j))
		case <-t.C:
		}
		// bubblewrap needs a few milliseconds to set the jail up: poll
		// finely, as this is on the path of every create.
		delay = min(2*delay, time.Millisecond)
		t.Reset(delay)
	}
}

// info describes a recorded sandbox as it is now. It runs as long as its
// init does: once the init is exiting the kernel is killing every other
// process of its pid namespace.
func (b *Backend) info(r *record) sandbox.Info {
	state := sandbox.StateStopped
	if alive(r.Pid, r.PidStart) {
		state = sandbox.StateRunning
	}
	return sandbox.Info{ID: r.ID, Backend: Name, Ref: r.ID, State: state, Labels: r.Labels}
}

// lookup reads the record of ref, or returns ErrNotFound.
func (b *Backend) lookup(ref string) (*record, error) {
	if !validID.MatchString(ref) {
		return nil, errdefs.Invalid("sandbox ref %q is not a local sandbox id", ref)
	}
	r, err := readRecord(filepath.Join(b.opts.StateDir, ref))
	if isNotExist(err) {
		return nil, errdefs.NotFound("sandbox", ref)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", ref, err)
	}
	return r, nil
}

// Inspect reports on sandbox ref (its id).
func (b *Backend) Inspect(ctx context.Context, ref string) (sandbox.Info, error) {
	unlock := b.locks.lock(ref)
	defer unlock()
	r, err := b.lookup(ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info(r), nil
}

// List returns the recorded sandboxes carrying all of labels, running or
// not.
func (b *Backend) List(ctx context.Context, want map[string]string) ([]sandbox.Info, error) {
	ents, err := os.ReadDir(b.opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("listing local sandboxes: %w", err)
	}
	var out []sandbox.Info
	for _, e := range ents {
		if !e.IsDir() || !validID.MatchString(e.Name()) {
			continue
		}
		r, err := readRecord(filepath.Join(b.opts.StateDir, e.Name()))
		if isNotExist(err) {
			continue // being created or removed
		}
		if err != nil {
			return nil, err
		}
		match := true
		for k, v := range want {
			if r.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, b.info(r))
		}
	}
	return out, nil
}

// Stop kills every process of sandbox ref.
func (b *Backend) Stop(ctx context.Context, ref string) error {
	unlock := b.locks.lock(ref)
	defer unlock()
	r, err := b.lookup(ref)
	if err != nil {
		return fmt.Errorf("stopping: %w", err)
	}
	return b.stop(r)
}

func (b *Backend) stop(r *record) error {
	b.mu.Lock()
	j := b.jails[r.ID]
	b.mu.Unlock()
	if j != nil && j.timer != nil {
		j.timer.Stop()
	}
	// SIGKILL to the pid namespace's init takes the whole namespace; the
	// cgroup sweep catches bubblewrap's monitor (and anything else).
	killPid(r.Pid, func() bool { return alive(r.Pid, r.PidStart) })
	// A frozen sandbox cannot die: thaw it first.
	if b.cg.exists(r.ID) {
		b.cg.freeze(r.ID, false)
	}
	if err := b.cg.kill(r.ID, killTimeout); err != nil {
		return fmt.Errorf("stopping sandbox %s: %w", r.ID, err)
	}
	// A process leaves cgroup.procs as it begins to exit. The init finishes
	// exiting only after every other process of its namespace has: wait
	// for that.
	if !waitGone(r.Pid, r.PidStart, killTimeout) {
		return fmt.Errorf("stopping sandbox %s: its init %d did not exit", r.ID, r.Pid)
	}
	if j != nil && !waitClosed(j.exited, killTimeout) {
		return fmt.Errorf("stopping sandbox %s: bubblewrap %d did not exit", r.ID, j.cmd.Process.Pid)
	}
	return nil
}

// Remove kills sandbox ref and deletes its cgroups, stage and record.
// Removing a sandbox that is already gone is not an error.
func (b *Backend) Remove(ctx context.Context, ref string) error {
	if !validID.MatchString(ref) {
		return errdefs.Invalid("sandbox ref %q is not a local sandbox id", ref)
	}
	unlock := b.locks.lock(ref)
	defer unlock()
	r, err := b.lookup(ref)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		// Leftovers of a Create that crashed the daemon half way.
		r = &record{ID: ref}
	case err != nil:
		return fmt.Errorf("removing: %w", err)
	}
	if err := b.stop(r); err != nil {
		return fmt.Errorf("removing: %w", err)
	}
	b.mu.Lock()
	j := b.jails[ref]
	b.mu.Unlock()
	if j != nil {
		// Create's unstaging, so that the sweep below finds it done.
		waitClosed(j.unstaged, killTimeout)
	}
	var errs []error
	if err := b.cg.remove(ref); err != nil {
		errs = append(errs, err)
	}
	if err := unstage(filepath.Join(b.stageDir, ref)); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(filepath.Join(b.opts.StateDir, ref)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing sandbox %s: %w", ref, err)
	}
	b.mu.Lock()
	delete(b.jails, ref)
	b.mu.Unlock()
	b.releaseImage(ref)
	return nil
}

// Pause freezes every process of sandbox ref.
func (b *Backend) Pause(ctx context.Context, ref string) error {
	return b.freeze(ref, true)
}

// Resume thaws a paused sandbox.
func (b *Backend) Resume(ctx context.Context, ref string) error {
	return b.freeze(ref, false)
}

func (b *Backend) freeze(ref string, frozen bool) error {
	unlock := b.locks.lock(ref)
	defer unlock()
	if _, err := b.lookup(ref); err != nil {
		return err
	}
	if err := b.cg.freeze(ref, frozen); err != nil {
		return fmt.Errorf("sandbox %s: %s: %w", ref, map[bool]string{true: "pausing", false: "resuming"}[frozen], err)
	}
	return nil
}

// Usage reads what the kernel has counted for sandbox ref.
func (b *Backend) Usage(ctx context.Context, ref string) (Usage, error) {
	unlock := b.locks.lock(ref)
	defer unlock()
	if _, err := b.lookup(ref); err != nil {
		return Usage{}, err
	}
	u, err := b.cg.usage(ref)
	if err != nil {
		return Usage{}, fmt.Errorf("sandbox %s: usage: %w", ref, err)
	}
	return u, nil
}

// GuestLog returns the end of what bubblewrap and the guest wrote for a
// sandbox this Backend started (empty for others).
func (b *Backend) GuestLog(ref string) string {
	b.mu.Lock()
	j := b.jails[ref]
	b.mu.Unlock()
	if j == nil {
		return ""
	}
	return j.log.String()
}
