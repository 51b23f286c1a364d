// Package docker runs agentbox sandboxes as Docker containers. One package
// serves two backends: "docker" (the runc runtime) and "gvisor" (the runsc
// runtime through the same engine). Each sandbox is one container that runs
// the agentbox guest as its init, as a non-root user with every capability
// dropped, no-new-privileges, Docker's default seccomp profile, a read-only
// root, a size-limited /tmp, no network, and pids, memory (no swap) and CPU
// limits. The workspace is bind-mounted nosuid,nodev at /workspace and the
// sandbox's run directory at /run/agentbox, where the guest dials the
// daemon's socket.
//
// When the guest has a user of its own (CreateRequest.GuestUID), the
// container starts as root with CAP_SETUID, CAP_SETGID, CAP_KILL and
// CAP_SETPCAP only, since an OCI runtime gives a non-root user none: the
// guest becomes its user before anything else runs, keeps the first three
// and empties the bounding set, and its commands run as the sandbox user
// with no capability at all (see package guest).
//
// The engine is reached with github.com/moby/moby/client, negotiating the
// API version (the engine here speaks 1.41). Nothing is ever pulled: an
// image that is not in the engine is an error.
//
// The engine's own /etc/hostname, /etc/hosts and /etc/resolv.conf are
// replaced by the backend's (see etcDir), so that no file under the
// engine's data root, and not the host's resolv.conf, is bound into a
// sandbox. The one entry of a runc sandbox's mount table that still names
// host paths is its root: the engine's overlay of the image's layers,
// whose options name their directories under the engine's data root
// (/var/lib/docker/overlay2/...). The engine offers no way around it on
// an ext4 or xfs host: overlay2 and containerd's overlayfs snapshotter
// name the layers' paths, vfs binds a directory whose path then shows as
// the root, and fuse-overlayfs, which would hide them, serves every file
// operation of the sandbox through a root daemon on the host. gVisor's
// sandboxes show no host path at all.
//
// Docker cannot put nosuid,nodev on a bind mount. A workspace that already
// sits on such a mount (the overlay workspace driver mounts so) is bound as
// is; for any other, Create makes a nosuid,nodev bind of it under
// Options.MountDir (root only) and Remove takes it down.
//
// The gvisor backend, as measured with runsc 2026-09 (the build
// scripts/setup.sh makes) on the systrap platform; the conformance suite
// records each point as a quirk:
//   - the pids limit counts the sentry's host threads and stub processes,
//     several per sandbox process: a limit of 128 admits about 40
//     processes, and reaching it ends the whole sandbox;
//   - exceeding the memory limit ends the whole sandbox (OOM-killed, 137),
//     not just the process;
//   - the mount table inside shows no nosuid or nodev, and a device node
//     on the workspace opens the sentry's own emulation of that device
//     (/dev/null is gVisor's null), never the host's: a node of a device
//     the sentry does not emulate fails with ENXIO;
//   - runsc applies the engine's seccomp profile only with --oci-seccomp:
//     commands are held by the guest's own filter (package seccomp),
//     which every backend's commands get (NoNewPrivs is 1 and the
//     capability sets, bounding set included, are empty as under runc);
//   - gVisor honours PR_SET_CHILD_SUBREAPER but miscounts a process
//     group's links when it reparents an orphan, so the guest's reapers
//     are not subreapers here (guest.SubreaperEnv);
//   - the sentry's own memory counts against the memory limit: a churn of
//     2,000 short-lived processes peaked at 164 MiB for the sandbox
//     (runsc 2022-12);
//   - /dev holds fuse and net/tun besides runc's minimal set: the gvisor
//     backend binds an empty root-owned file of mode 0000 over each, so
//     they list but do not open;
//   - before gVisor release-20251215.0 (Debian's runsc among them),
//     /proc/PID/environ, auxv, maps and smaps are mode 0444 and the fd
//     directory 0555, with no ptrace check (fixed upstream in
//     release-20251215.0; the fdinfo directory stays open in later ones):
//     any process reads those of any other, the guest's included,
//     whatever its user. The guest's descriptors still do not open to
//     commands, and its environment holds no token.
//
// Debian's runsc 0.0~20221219, which setup.sh falls back to when it cannot
// build the pinned one, fails statx (ls -l, stat: EINVAL), and agentbox
// doctor says so.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// errForeign marks a container that exists but is not one of this
// backend's sandboxes: it is reported as not found, and never touched.
var errForeign = errors.New("the container is not a sandbox of backend")

// Backend names and the runtimes they use.
const (
	NameDocker   = "docker"
	NameGVisor   = "gvisor"
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
)

// LabelBackend names the backend that made a container, so that the docker
// and gvisor backends, which share one engine, each list only their own.
const LabelBackend = "agentbox.backend"

// guestEnvPrefix is the only prefix a guest environment variable may have:
// nothing else of the daemon's reaches a sandbox.
const guestEnvPrefix = "AGENTBOX_GUEST_"

// validID is what a sandbox id must look like to name a container, a host
// and a directory.
var validID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// Log keys.
const (
	logSandbox = "sandbox_id"
	logBackend = "backend"
)

// Options configure a Backend.
type Options struct {
	// Runtime is the engine's OCI runtime: "runc" or "runsc".
	Runtime string
	// Name is the backend's name: "docker" or "gvisor".
	Name string
	// Host is the engine's address; empty means $DOCKER_HOST, or the
	// default unix socket when that is unset.
	Host string
	// MountDir is a host directory, private to the daemon, where Create makes
	// a nosuid,nodev bind of a workspace that does not already sit on a
	// nosuid,nodev mount (Docker cannot set those flags on a bind). Default
	// /run/agentbox/<Name>.
	MountDir string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	// The guest exits at once on SIGTERM; default 5s.
	StopTimeout time.Duration
	// Logger receives rollback and cleanup warnings; nil discards them.
	Logger *slog.Logger
	// ImageCache is where the use of an image named by path is recorded
	// for `image ls` (image.RecordPath); default image.DefaultCache.
	ImageCache string
}

// Backend is a sandbox.Backend (and sandbox.Pauser) on a Docker engine.
type Backend struct {
	name        string
	runtime     string
	mountDir    string
	stopTimeout time.Duration
	log         *slog.Logger
	c           *client.Client
	imageCache  string
	// users caches the passwd and group files of images by id (image
	// ids name content, so an entry never goes stale).
	users sync.Map

	// creating holds the ids of sandboxes whose Create is under way, so that
	// a sweep of workspace binds never takes one that has no container yet.
	mu       sync.Mutex
	creating map[string]bool
	// attached holds the ids of pooled sandboxes whose workspace is
	// attached (see pool.go), so that none is ever attached twice.
	attached sync.Map
}

var (
	_ sandbox.Backend = (*Backend)(nil)
	_ sandbox.Pauser  = (*Backend)(nil)
)

// New returns a backend. It does not contact the engine: the first call
// does, and reports an unreachable engine as errdefs.ErrUnavailable.
func New(opts Options) (*Backend, error) {
	switch {
	case opts.Name != NameDocker && opts.Name != NameGVisor:
		return nil, errdefs.Invalid("docker backend: name %q is not %q or %q", opts.Name, NameDocker, NameGVisor)
	case opts.Runtime != RuntimeRunc && opts.Runtime != RuntimeRunsc:
		return nil, errdefs.Invalid("docker backend %s: runtime %q is not %q or %q", opts.Name, opts.Runtime, RuntimeRunc, RuntimeRunsc)
	case opts.StopTimeout < 0:
		return nil, errdefs.Invalid("docker backend %s: negative stop timeout", opts.Name)
	}
	host := opts.Host
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = client.DefaultDockerHost
	}
	if u, err := client.ParseHostURL(host); err != nil || !slices.Contains([]string{"unix", "tcp", "http", "https"}, u.Scheme) {
		return nil, errdefs.Invalid("docker backend %s: engine address %q is not unix://, tcp:// or http(s)://", opts.Name, host)
	}
	// API versions are negotiated on the first request (the client's
	// default); WithAPIVersionNegotiation only says so.
	c, err := client.New(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, errdefs.Invalid("docker backend %s: engine address %q: %v", opts.Name, host, err)
	}
	if opts.MountDir == "" {
		opts.MountDir = "/run/agentbox/" + opts.Name
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ImageCache == "" {
		opts.ImageCache = image.DefaultCache
	}
	return &Backend{
		imageCache:  opts.ImageCache,
		name:        opts.Name,
		runtime:     opts.Runtime,
		mountDir:    opts.MountDir,
		stopTimeout: opts.StopTimeout,
		log:         opts.Logger.With(logBackend, opts.Name),
		c:           c,
		creating:    make(map[string]bool),
	}, nil
}

// Close releases the engine client's idle connections.
func (b *Backend) Close() error { return b.c.Close() }

// Name is "docker" or "gvisor".
func (b *Backend) Name() string { return b.name }

// Runtime is the OCI runtime the backend's containers run under.
func (b *Backend) Runtime() string { return b.runtime }

// containerName is the container of sandbox id: one per sandbox, so that
// the engine itself refuses a second.
func containerName(id string) string { return "agentbox-" + id }

// Create starts one container running the guest. Every step is undone when
// a later one fails.
func (b *Backend) Create(ctx context.Context, req sandbox.CreateRequest) (_ sandbox.Info, err error) {
	return b.create(ctx, req, "")
}

// create is Create, or with owner set CreateDetached (see pool.go).
func (b *Backend) create(ctx context.Context, req sandbox.CreateRequest, owner string) (_ sandbox.Info, err error) {
	spec := req.Spec.WithDefaults()
	if err := b.validate(req, spec, owner != ""); err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	if !b.beginCreate(req.ID) {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: another create of it is under way: %w", req.ID, errdefs.ErrConflict)
	}
	defer b.endCreate(req.ID)

	var undo rollback
	defer func() {
		if err != nil {
			undo.run(b.log.With(logSandbox, req.ID))
		}
	}()

	var src string
	var release func() error
	if owner == "" {
		src, release, err = b.workspaceSource(req.ID, req.Files)
	} else {
		src, release, err = b.poolPoint(req.ID)
	}
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: workspace %s: %w", req.ID, req.Files, err)
	}
	undo.add("releasing the workspace bind", func(context.Context) error { return release() })

	etc, releaseEtc, err := b.etcDir(req.ID, req.ID)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	undo.add("removing the /etc files", func(context.Context) error { return releaseEtc() })

	var mask string
	if b.runtime == RuntimeRunsc {
		if mask, err = b.maskFile(); err != nil {
			return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
		}
	}
	imageID, err := b.engineImage(ctx, spec.Image)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, err)
	}
	cfg, host := b.containerConfig(req, spec, src, etc, mask)
	cfg.Image = imageID
	if owner != "" {
		detach(cfg, host, owner)
	}
	created, err := b.c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       containerName(req.ID),
		Config:     cfg,
		HostConfig: host,
	})
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: %w", req.ID, createErr(spec.Image, err))
	}
	id := created.ID
	undo.add("removing container "+short(id), func(ctx context.Context) error {
		_, err := b.c.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if isNotFound(err) {
			return nil
		}
		return err
	})
	if _, err := b.c.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return sandbox.Info{}, fmt.Errorf("creating sandbox %s: starting container %s: %w", req.ID, short(id), engineErr(err))
	}
	// The container's mount namespace holds its copies of the /etc files.
	if err := releaseEtc(); err != nil {
		b.log.Warn("taking the /etc files off the host", logSandbox, req.ID, "error", err)
	}
	return sandbox.Info{ID: req.ID, Backend: b.name, Ref: id, State: sandbox.StateRunning, Labels: cfg.Labels}, nil
}

// validate checks what Create needs before anything is made.
// A detached create (a warm pool's) has no workspace yet.
func (b *Backend) validate(req sandbox.CreateRequest, spec sandbox.Spec, detached bool) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := checkGuestEnv(req.GuestEnv); err != nil {
		return err
	}
	if err := req.CheckGuestUser(); err != nil {
		return err
	}
	switch {
	case !validID.MatchString(req.ID):
		return errdefs.Invalid("sandbox id %q is not usable as a container name and hostname", req.ID)
	case req.WorkspaceID == "" && !detached:
		return errdefs.Invalid("no workspace id")
	case detached && (req.WorkspaceID != "" || req.Files != ""):
		return errdefs.Invalid("a detached environment gets its workspace when it is attached, not at its start")
	case req.UID <= 0 || req.GID <= 0:
		return errdefs.Invalid("uid:gid %d:%d: sandboxes run as a non-root user and group", req.UID, req.GID)
	case spec.Backend != "" && spec.Backend != b.name:
		return errdefs.Invalid("spec asks for backend %q, this is %q", spec.Backend, b.name)
	}
	return req.CheckHostPaths(detached)
}

// checkGuestEnv checks that the guest's environment holds only guest
// variables: nothing else of the daemon's may reach a sandbox.
func checkGuestEnv(env []string) error {
	if len(env) == 0 {
		return errdefs.Invalid("no guest environment: the guest would start without its token")
	}
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(k, guestEnvPrefix) || strings.IndexByte(e, 0) >= 0 {
			return errdefs.Invalid("guest environment entry %q is not %s*=value", k, guestEnvPrefix)
		}
	}
	return nil
}

func (b *Backend) beginCreate(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.creating[id] {
		return false
	}
	b.creating[id] = true
	return true
}

func (b *Backend) endCreate(id string) {
	b.mu.Lock()
	delete(b.creating, id)
	b.mu.Unlock()
}

func (b *Backend) isCreating(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.creating[id]
}

// Inspect reports on the container ref (an id or a name). A container that
// is not this backend's is reported as not found.
func (b *Backend) Inspect(ctx context.Context, ref string) (sandbox.Info, error) {
	info, err := b.inspect(ctx, ref)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("inspecting sandbox container %s: %w", short(ref), err)
	}
	return info, nil
}

func (b *Backend) inspect(ctx context.Context, ref string) (sandbox.Info, error) {
	if ref == "" {
		return sandbox.Info{}, errdefs.Invalid("empty container reference")
	}
	res, err := b.c.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if err != nil {
		return sandbox.Info{}, engineErr(err)
	}
	ctr := res.Container
	var labels map[string]string
	if ctr.Config != nil {
		labels = ctr.Config.Labels
	}
	if !b.owns(labels) {
		return sandbox.Info{}, fmt.Errorf("%w %s: %w", errForeign, b.name, errdefs.ErrNotFound)
	}
	state := sandbox.StateStopped
	if ctr.State != nil && (ctr.State.Running || ctr.State.Paused || ctr.State.Restarting) {
		state = sandbox.StateRunning
	}
	return sandbox.Info{ID: labels[sandbox.LabelSandbox], Backend: b.name, Ref: ctr.ID, State: state, Labels: ownLabels(labels)}, nil
}

// owns says whether a container with these labels is one of this backend's.
func (b *Backend) owns(labels map[string]string) bool {
	return labels[sandbox.LabelManaged] == "1" && labels[LabelBackend] == b.name && labels[sandbox.LabelSandbox] != ""
}

// ownLabels keeps the agentbox labels of a container.
func ownLabels(labels map[string]string) map[string]string {
	out := make(map[string]string)
	for _, k := range []string{sandbox.LabelManaged, sandbox.LabelSandbox, sandbox.LabelWorkspace, LabelBackend, sandbox.LabelOwner, sandbox.LabelPool, sandbox.LabelPoolOwner} {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// List returns this backend's containers carrying all the given labels,
// running or not.
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	f := make(client.Filters).Add("label", sandbox.LabelManaged+"=1", LabelBackend+"="+b.name)
	for k, v := range labels {
		if k == "" || strings.ContainsRune(k, '=') {
			return nil, errdefs.Invalid("listing sandboxes: label key %q", k)
		}
		f.Add("label", k+"="+v)
	}
	res, err := b.c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing %s sandboxes: %w", b.name, engineErr(err))
	}
	out := []sandbox.Info{}
	for _, s := range res.Items {
		if !b.owns(s.Labels) {
			continue
		}
		state := sandbox.StateStopped
		switch s.State {
		case "running", "paused", "restarting":
			state = sandbox.StateRunning
		}
		out = append(out, sandbox.Info{ID: s.Labels[sandbox.LabelSandbox], Backend: b.name, Ref: s.ID, State: state, Labels: ownLabels(s.Labels)})
	}
	return out, nil
}

// Stop sends the guest SIGTERM (it kills every process and exits) and
// SIGKILL after the stop timeout. Stopping a stopped container is not an
// error.
func (b *Backend) Stop(ctx context.Context, ref string) error {
	info, err := b.inspect(ctx, ref)
	if err != nil {
		return fmt.Errorf("stopping sandbox container %s: %w", short(ref), err)
	}
	secs := int(math.Ceil(b.stopTimeout.Seconds()))
	if _, err := b.c.ContainerStop(ctx, info.Ref, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("stopping sandbox %s (container %s): %w", info.ID, short(info.Ref), engineErr(err))
	}
	return nil
}

// Remove deletes the container (killing it if it runs) and the workspace
// bind made for it. Removing what is already gone is not an error.
func (b *Backend) Remove(ctx context.Context, ref string) error {
	info, err := b.inspect(ctx, ref)
	if errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errForeign) {
		// Gone already, perhaps removed from outside: release any
		// workspace bind whose container no longer exists.
		if err := b.sweepBinds(ctx); err != nil {
			b.log.Warn("sweeping workspace binds", "error", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing sandbox container %s: %w", short(ref), err)
	}
	_, err = b.c.ContainerRemove(ctx, info.Ref, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("removing sandbox %s (container %s): %w", info.ID, short(info.Ref), engineErr(err))
	}
	if err := b.releaseBind(info.ID); err != nil {
		return fmt.Errorf("removing sandbox %s: %w", info.ID, err)
	}
	b.attached.Delete(info.ID)
	return nil
}

// Pause freezes every process of the sandbox.
func (b *Backend) Pause(ctx context.Context, ref string) error {
	info, err := b.inspect(ctx, ref)
	if err != nil {
		return fmt.Errorf("pausing sandbox container %s: %w", short(ref), err)
	}
	if _, err := b.c.ContainerPause(ctx, info.Ref, client.ContainerPauseOptions{}); err != nil {
		return fmt.Errorf("pausing sandbox %s (container %s): %w", info.ID, short(info.Ref), engineErr(err))
	}
	return nil
}

// Resume thaws a paused sandbox.
func (b *Backend) Resume(ctx context.Context, ref string) error {
	info, err := b.inspect(ctx, ref)
	if err != nil {
		return fmt.Errorf("resuming sandbox container %s: %w", short(ref), err)
	}
	if _, err := b.c.ContainerUnpause(ctx, info.Ref, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("resuming sandbox %s (container %s): %w", info.ID, short(info.Ref), engineErr(err))
	}
	return nil
}

// short abbreviates a container id for messages.
func short(id string) string {
	if len(id) > 12 && !strings.HasPrefix(id, "agentbox-") {
		return id[:12]
	}
	return id
}

// rollback undoes the steps of a create in reverse order.
type rollback struct {
	steps []rollbackStep
}

type rollbackStep struct {
	what string
	fn   func(context.Context) error
}

func (r *rollback) add(what string, fn func(context.Context) error) {
	r.steps = append(r.steps, rollbackStep{what, fn})
}

// run undoes every step, even when the create's context is cancelled:
// leaving half a sandbox behind is worse than a late return.
func (r *rollback) run(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := len(r.steps) - 1; i >= 0; i-- {
		if err := r.steps[i].fn(ctx); err != nil {
			log.Warn("rolling back a failed create", "step", r.steps[i].what, "error", err)
		}
	}
}

var _ sandbox.ImageInspector = (*Backend)(nil)

// ImageConfig reads an image's ENV, WORKDIR and USER from the engine (an
// image named by path is loaded into it first).
func (b *Backend) ImageConfig(ctx context.Context, name string) (sandbox.ImageConfig, error) {
	id, err := b.engineImage(ctx, name)
	if err != nil {
		return sandbox.ImageConfig{}, err
	}
	res, err := b.c.ImageInspect(ctx, id)
	if err != nil {
		return sandbox.ImageConfig{}, fmt.Errorf("inspecting image %s: %w", name, engineErr(err))
	}
	if res.Config == nil {
		return sandbox.ImageConfig{}, nil
	}
	out := sandbox.ImageConfig{Env: res.Config.Env, WorkingDir: res.Config.WorkingDir, User: res.Config.User}
	if out.User == "" {
		return out, nil
	}
	passwd, group, err := b.accountFiles(ctx, res.ID)
	if err != nil {
		return sandbox.ImageConfig{}, fmt.Errorf("image %s: reading its users: %w", name, err)
	}
	a, err := image.ResolveUser(out.User, passwd, group)
	if err != nil {
		return sandbox.ImageConfig{}, fmt.Errorf("image %s: %w", name, err)
	}
	if a != nil {
		out.Account = &sandbox.Account{Name: a.Name, UID: a.UID, GID: a.GID, Home: a.Home}
	}
	return out, nil
}

// engineImage is what a container of the spec's image is created from:
// the name itself for an image in the engine, or the id of an image named
// by path (oci:, oci-archive:, docker-archive:), which is loaded into the
// engine, untagged, the first time (image.LoadPath).
func (b *Backend) engineImage(ctx context.Context, name string) (string, error) {
	if !image.IsPathRef(name) {
		return name, nil
	}
	id, err := image.LoadPath(ctx, b.c, name)
	if err != nil {
		return "", err
	}
	image.RecordPath(b.imageCache, name, id, b.name)
	return id, nil
}
