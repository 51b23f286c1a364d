// Package sandbox is the domain of disposable execution environments: the
// spec a sandbox is made from, its states, and the small Backend interface
// every execution backend (docker, gvisor, local; later kubernetes and
// remote services) implements.
//
// A sandbox runs the agentbox guest as its init, with one workspace's
// files mounted at /workspace and a per-sandbox run directory at
// /run/agentbox, where the guest dials the daemon's unix socket. No
// network is needed for that. Backends only make, find and destroy
// environments; the manager owns everything else (records, guest
// connection, replacement). This package imports no Docker, Kubernetes or
// HTTP code: backends import it, never the other way.
package sandbox

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// State is where a sandbox is in its life.
type State string

// States. A sandbox the database thinks is running but whose environment
// is gone becomes Lost; the next exec on its workspace replaces it.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopped  State = "stopped"
	StateLost     State = "lost"
)

// Mount points inside every environment.
const (
	WorkspaceDir = "/workspace"
	RunDir       = "/run/agentbox"
	GuestPath    = "/run/agentbox-guest"
)

// Labels put on everything a backend creates, so that the reconciler can
// find what belongs to agentbox and to which sandbox.
const (
	LabelManaged   = "agentbox.managed"
	LabelSandbox   = "agentbox.sandbox"
	LabelWorkspace = "agentbox.workspace"
	// LabelOwner names the daemon (its data dir) that made an environment,
	// so that the reconciler of one daemon never touches another's on a
	// shared engine.
	LabelOwner = "agentbox.owner"
)

// Limits are the hard resource limits of one sandbox.
type Limits struct {
	// CPUs is the CPU quota in cores (0.5 = half a core).
	CPUs float64 `json:"cpus"`
	// MemoryBytes is the memory limit, swap included (no swap).
	MemoryBytes int64 `json:"memory_bytes"`
	// Pids caps the number of processes and threads.
	Pids int64 `json:"pids"`
	// TmpBytes sizes the /tmp tmpfs.
	TmpBytes int64 `json:"tmp_bytes"`
}

// MinPids is the lowest pids limit a sandbox may ask for: the guest is a
// Go program (a handful of threads) and starts a reaper per exec.
const MinPids = 32

// DefaultLimits are applied where a spec leaves a limit at zero.
var DefaultLimits = Limits{CPUs: 1, MemoryBytes: 1 << 30, Pids: 512, TmpBytes: 256 << 20}

// Spec is what a sandbox is made from. It is recorded with the sandbox so
// that a replacement gets exactly the same.
type Spec struct {
	// Backend is "docker", "gvisor", "local" or "kubernetes".
	Backend string `json:"backend"`
	// Image is an image name in the engine (any backend; local unpacks it),
	// the name of a root file system `image build` unpacked (local), or an
	// image named by a path on the daemon's host: oci:DIR[:TAG],
	// oci-archive:FILE[:TAG] or docker-archive:FILE[:NAME:TAG] (any backend).
	Image string `json:"image"`
	// Limits are the hard limits; zero fields take DefaultLimits.
	Limits Limits `json:"limits"`
	// Lifetime, when positive, stops the sandbox this long after creation.
	Lifetime time.Duration `json:"lifetime,omitempty"`
	// Policy is the caller's policy document, canonical (see package
	// policy); nil is the default policy: no network at all, nothing in
	// the environment but the image's ENV and what each exec names. Only the manager reads it:
	// it turns the policy's limits into Limits and Lifetime, and serves
	// the egress proxy that an allowlist calls for.
	Policy *policy.Policy `json:"policy,omitempty"`
}

// Egress reports whether the spec's policy lets the sandbox reach any host
// through the egress proxy.
func (s Spec) Egress() bool {
	return s.Policy != nil && s.Policy.Network.Mode == policy.ModeAllowlist && len(s.Policy.Network.Allow) > 0
}

// WithDefaults fills zero limits from DefaultLimits.
func (s Spec) WithDefaults() Spec {
	if s.Limits.CPUs == 0 {
		s.Limits.CPUs = DefaultLimits.CPUs
	}
	if s.Limits.MemoryBytes == 0 {
		s.Limits.MemoryBytes = DefaultLimits.MemoryBytes
	}
	if s.Limits.Pids == 0 {
		s.Limits.Pids = DefaultLimits.Pids
	}
	if s.Limits.TmpBytes == 0 {
		s.Limits.TmpBytes = DefaultLimits.TmpBytes
	}
	return s
}

// Validate checks a spec against sanity bounds (ceilings set by the
// daemon's configuration are checked by the caller).
func (s Spec) Validate() error {
	l := s.Limits
	switch {
	case s.Image == "":
		return errdefs.Invalid("sandbox spec: image is empty")
	case l.CPUs < 0.01 || l.CPUs > 1024:
		return errdefs.Invalid("sandbox spec: cpus %g is outside 0.01..1024", l.CPUs)
	case l.MemoryBytes < 16<<20:
		return errdefs.Invalid("sandbox spec: memory %d bytes is under 16 MiB", l.MemoryBytes)
	case l.Pids < MinPids || l.Pids > 1<<22:
		return errdefs.Invalid("sandbox spec: pids %d is outside %d..4194304 (the guest and its per-exec reapers need threads too)", l.Pids, MinPids)
	case l.TmpBytes < 1<<20:
		return errdefs.Invalid("sandbox spec: /tmp size %d bytes is under 1 MiB", l.TmpBytes)
	case l.TmpBytes > l.MemoryBytes:
		// /tmp is a tmpfs charged to the sandbox's memory: a larger one
		// could only ever end in the OOM killer.
		return errdefs.Invalid("sandbox spec: /tmp size %d bytes is over the memory limit %d bytes (/tmp is held in memory)", l.TmpBytes, l.MemoryBytes)
	case s.Lifetime < 0:
		return errdefs.Invalid("sandbox spec: lifetime %s is negative", s.Lifetime)
	}
	return nil
}

// CreateRequest is everything a backend needs to start one environment.
type CreateRequest struct {
	// ID is the sandbox's identifier ("sb_...").
	ID string
	// WorkspaceID names the workspace, for labels.
	WorkspaceID string
	// Files is the host path of the workspace's files, mounted read-write
	// (nosuid, nodev) at WorkspaceDir.
	Files string
	// RunDir is the host directory mounted at RunDir; the daemon listens on
	// a unix socket in it.
	RunDir string
	// Guest is the host path of the static agentbox-guest binary, mounted
	// read-only at GuestPath and run as init with GuestArgs.
	//
	// The manager hands RunDir and Guest over on mounts of their own,
	// which it takes off the host once Create has returned (so that a
	// sandbox's mount table names no host path, SECURITY.md H45): by then
	// the environment must hold its own mounts of both, and a backend
	// never looks them up again.
	Guest     string
	GuestArgs []string
	// GuestEnv is the guest's whole environment ("KEY=value"), e.g. its
	// token (guest.TokenEnv). Nothing else of the daemon's environment may
	// reach the sandbox.
	GuestEnv []string
	// UID and GID are the non-root user commands run as: everything
	// inside but the guest, when GuestUID is set.
	UID, GID int
	// GuestUID and GuestGID, when GuestUID is not 0, are the guest's own
	// non-root user, apart from UID (SECURITY.md H44). RunDir and the
	// daemon's sockets in it belong to that user, and the backend starts
	// the guest with the capabilities to become it and to start commands
	// as UID/GID (see package guest); commands keep none, and can neither
	// connect to those sockets nor reach into the guest's process. 0: the
	// guest runs as UID/GID, like its commands.
	GuestUID, GuestGID int
	// Spec is the image and limits.
	Spec Spec
	// Owner, when set, is put on the environment as LabelOwner.
	Owner string
}

// Info is what a backend knows about one environment.
type Info struct {
	// ID is the sandbox's identifier (from its labels).
	ID string `json:"id"`
	// Backend is the backend's name.
	Backend string `json:"backend"`
	// Ref is the backend's own handle (container ID, supervisor pid, ...).
	Ref string `json:"ref"`
	// State is StateRunning or StateStopped.
	State State `json:"state"`
	// Labels are the agentbox labels the environment carries.
	Labels map[string]string `json:"labels,omitempty"`
}

// Backend makes, finds and destroys execution environments. Methods are
// safe for concurrent use. Lookups of an environment that no longer exists
// return an error wrapping errdefs.ErrNotFound.
type Backend interface {
	// Name is the backend's name ("docker", "gvisor", "local").
	Name() string
	// Create starts an environment running the guest. On error nothing of
	// it is left behind.
	Create(ctx context.Context, req CreateRequest) (Info, error)
	// Inspect reports on the environment ref.
	Inspect(ctx context.Context, ref string) (Info, error)
	// List returns the environments carrying all the given labels.
	List(ctx context.Context, labels map[string]string) ([]Info, error)
	// Stop ends every process of the environment; Remove then deletes it.
	Stop(ctx context.Context, ref string) error
	// Remove deletes a stopped or running environment and everything the
	// backend made for it. Removing what is already gone is not an error.
	Remove(ctx context.Context, ref string) error
}

// ImageConfig is what an image says about the commands run in it (its
// ENV, WORKDIR and USER), as the engine or an unpacked image's config
// records it.
type ImageConfig struct {
	// Env is the image's environment, "KEY=value" entries in order.
	Env []string `json:"env,omitempty"`
	// WorkingDir is the image's WORKDIR.
	WorkingDir string `json:"working_dir,omitempty"`
	// User is the image's USER ("name", "uid" or "uid:gid").
	User string `json:"user,omitempty"`
	// Account is User resolved in the image's own /etc/passwd and
	// /etc/group; nil when User is empty or root. Commands never run as
	// root, nor as another uid than CreateRequest.UID (the owner of the
	// workspace's files): the account gives them its name (USER,
	// LOGNAME) and, where it is writable, its home (HOME).
	Account *Account `json:"account,omitempty"`
}

// Account is a user of an image.
type Account struct {
	// Name is the user's name; empty for a uid the image's passwd lacks.
	Name string `json:"name,omitempty"`
	// UID and GID are its ids in the image.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Home is its home directory in the image's passwd.
	Home string `json:"home,omitempty"`
}

// ImageInspector is implemented by backends that can read an image's
// config: the manager starts every command's environment from it.
type ImageInspector interface {
	ImageConfig(ctx context.Context, image string) (ImageConfig, error)
}

// ImageCollector is implemented by backends that keep images unpacked
// on the host (local): CollectImages removes the unpacked images whose
// image is gone (from the engine, or from the path that named it) and
// that no environment runs from, or in a dry run lists them.
type ImageCollector interface {
	CollectImages(ctx context.Context, dryRun bool) ([]CollectedImage, error)
}

// CollectedImage is one unpacked image an ImageCollector removed or would
// remove.
type CollectedImage struct {
	// ID is the image id ("sha256:..."); Name what it was unpacked as.
	ID, Name string
	// Reason says why it is garbage; Bytes what it held on disk.
	Reason string
	Bytes  int64
	// Removed is set once it is gone; Error says why removing failed.
	Removed bool
	Error   string
}

// DefaultPath is a command's PATH when neither its image nor anything
// else sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultHome is a command's HOME when its image's ENV sets none: the root
// file system is read-only, so the user's home in the image's passwd
// cannot take ~/.cache, ~/.npm or ~/.gitconfig. The guest makes it on
// first use; it lives and dies with the sandbox's /tmp.
const DefaultHome = "/tmp/home"

// Pauser is implemented by backends that can freeze an environment, e.g.
// while the host reads its workspace.
type Pauser interface {
	Pause(ctx context.Context, ref string) error
	Resume(ctx context.Context, ref string) error
}

// CheckGuestUser checks GuestUID and GuestGID of req: unset, or a
// non-root user that is not the commands'.
func (r CreateRequest) CheckGuestUser() error {
	switch {
	case r.GuestUID == 0 && r.GuestGID == 0:
		return nil
	case r.GuestUID <= 0 || r.GuestGID <= 0 || r.GuestUID > 1<<31-2 || r.GuestGID > 1<<31-2:
		return errdefs.Invalid("guest uid:gid %d:%d: the guest runs as a non-root user and group", r.GuestUID, r.GuestGID)
	case r.GuestUID == r.UID:
		return errdefs.Invalid("guest uid %d is the commands' uid: the guest's user must be its own", r.GuestUID)
	}
	return nil
}

// CheckHostPaths checks that the request's workspace and run directory are
// directories and its guest a regular file, all named by absolute paths;
// noWorkspace leaves the workspace out (a detached environment gets one
// later).
func (r CreateRequest) CheckHostPaths(noWorkspace bool) error {
	for _, p := range []struct{ what, path string }{{"workspace", r.Files}, {"run directory", r.RunDir}, {"guest", r.Guest}} {
		if noWorkspace && p.what == "workspace" {
			continue
		}
		if !strings.HasPrefix(p.path, "/") {
			return errdefs.Invalid("%s path %q is not absolute", p.what, p.path)
		}
		fi, err := os.Stat(p.path)
		if err != nil {
			return errdefs.Invalid("%s: %v", p.what, err)
		}
		if wantDir := p.what != "guest"; fi.IsDir() != wantDir || (!wantDir && !fi.Mode().IsRegular()) {
			return errdefs.Invalid("%s %s is not a %s", p.what, p.path, map[bool]string{true: "directory", false: "regular file"}[wantDir])
		}
	}
	return nil
}

// GuestEnvUsers are the guest's environment entries that tell it its own
// user and its commands' (guest.UserEnv, guest.CommandUserEnv), when
// GuestUID is set. They are named here, not taken from package guest,
// which this package does not import.
func (r CreateRequest) GuestEnvUsers() []string {
	if r.GuestUID == 0 {
		return nil
	}
	return []string{
		fmt.Sprintf("AGENTBOX_GUEST_USER=%d:%d", r.GuestUID, r.GuestGID),
		fmt.Sprintf("AGENTBOX_GUEST_COMMAND_USER=%d:%d", r.UID, r.GID),
	}
}

// ErrNoBackend names an unknown backend.
func ErrNoBackend(name string, known []string) error {
	return fmt.Errorf("backend %q is not one of %v: %w", name, known, errdefs.ErrInvalid)
}
