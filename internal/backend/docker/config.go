package docker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/hostbind"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Guest log limits: the guest writes a few lines to stderr, which is all
// the container log holds (commands' output goes over the socket).
const (
	logMaxSize  = "1m"
	logMaxFiles = "1"
)

// containerConfig is the container of one sandbox. workspace is the host
// path bind-mounted at /workspace (req.Files, or a nosuid,nodev bind of it);
// etc holds the files bound over the engine's /etc files (see etcDir);
// mask, when set, is the file bound over gVisor's extra device nodes.
func (b *Backend) containerConfig(req sandbox.CreateRequest, spec sandbox.Spec, workspace, etc, mask string) (*container.Config, *container.HostConfig) {
	l := spec.Limits
	stop := int(b.stopTimeout.Seconds() + 0.999)
	pids := l.Pids
	noInit := false
	user, caps := strconv.Itoa(req.UID)+":"+strconv.Itoa(req.GID), []string(nil)
	if req.GuestUID != 0 {
		// An OCI runtime grants a non-root user no capability, so the
		// guest starts as root with only those it needs to become its own
		// user and run commands as the sandbox user (initd.BecomeGuest),
		// and drops root before anything else runs.
		user, caps = "0:0", guestCaps
	}
	cfg := &container.Config{
		Hostname: req.ID,
		// With NetworkMode none, runc still gives the container a network
		// namespace of its own with only a loopback device (up), as the
		// engine's "none" network does; disabled, the engine's network
		// controller (libnetwork) is not involved at all. Its "none"
		// network made an endpoint for every container, and in the
		// engine here (20.10.24) removing hundreds of them at once
		// deadlocks it (moby/libnetwork#2649: getSvcRecords takes the
		// network's lock then the controller's, processEndpointDelete
		// the reverse), after which no container can be removed or
		// created until the engine restarts.
		NetworkDisabled: true,
		User:            user,
		// Only what the guest needs: the image adds its own ENV (PATH) and
		// the engine HOSTNAME and HOME; commands get none of it, since the
		// guest gives each exactly the environment its request names.
		Env:        b.guestEnv(append(req.GuestEnvUsers(), req.GuestEnv...)),
		Entrypoint: []string{sandbox.GuestPath},
		Cmd:        append([]string{}, req.GuestArgs...),
		Image:      spec.Image,
		WorkingDir: "/",
		Labels: map[string]string{
			sandbox.LabelManaged:   "1",
			sandbox.LabelSandbox:   req.ID,
			sandbox.LabelWorkspace: req.WorkspaceID,
			LabelBackend:           b.name,
		},
		StopSignal:  "SIGTERM",
		StopTimeout: &stop,
	}
	private := &mount.BindOptions{Propagation: mount.PropagationRPrivate}
	host := &container.HostConfig{
		Runtime:     b.runtime,
		NetworkMode: "none",
		// Private namespaces for everything; the guest is init.
		IpcMode:      container.IPCModePrivate,
		CgroupnsMode: container.CgroupnsModePrivate,
		Init:         &noInit,
		CapDrop:      []string{"ALL"},
		CapAdd:       caps,
		// Docker's default seccomp profile stays: no seccomp= option here.
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		// exec: the root is read-only and /workspace is executable anyway,
		// and builds and test runners execute what they put in /tmp.
		Tmpfs: map[string]string{
			"/tmp": fmt.Sprintf("rw,nosuid,nodev,exec,size=%d,mode=1777", l.TmpBytes),
		},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: req.Guest, Target: sandbox.GuestPath, ReadOnly: true, BindOptions: private},
			// Read-only: the guest only connects to the daemon's socket
			// there, which a read-only mount allows; a writable one would
			// let the sandbox fill the daemon's disk outside every quota.
			{Type: mount.TypeBind, Source: req.RunDir, Target: sandbox.RunDir, ReadOnly: true, BindOptions: private},
			{Type: mount.TypeBind, Source: workspace, Target: sandbox.WorkspaceDir, BindOptions: private},
		},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{
			"max-size": logMaxSize, "max-file": logMaxFiles,
		}},
		Resources: container.Resources{
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes, // equal: no swap
			NanoCPUs:   int64(l.CPUs * 1e9),
			PidsLimit:  &pids,
		},
	}
	for _, f := range hostbind.EtcFiles {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Join(etc, f.Name), Target: f.Target, ReadOnly: true, BindOptions: private})
	}
	if mask != "" {
		for _, dev := range gvisorExtraDevices {
			host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: mask, Target: dev, ReadOnly: true, BindOptions: private})
		}
	}
	if req.Owner != "" {
		cfg.Labels[sandbox.LabelOwner] = req.Owner
	}
	return cfg, host
}

// guestCaps are what a guest with a user of its own starts with: three it
// keeps, CAP_SETPCAP to empty its bounding set before it drops that too.
var guestCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}

// gvisorExtraDevices are nodes that runsc puts in every sandbox's /dev
// beyond the minimal set runc makes. The gvisor backend binds an
// unreadable empty file over each (see Backend.maskFile).
var gvisorExtraDevices = []string{"/dev/fuse", "/dev/net/tun"}

// engineErr classifies an error of an engine call.
func engineErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return fmt.Errorf("docker engine: %v: %w", err, errdefs.ErrUnavailable)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrNotFound)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%v: %w", err, errdefs.ErrConflict)
	}
	return fmt.Errorf("docker engine: %w", err)
}

// createErr classifies an error of ContainerCreate: the only thing create
// looks up is the image, so not found means the image is missing.
func createErr(image string, err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("image %s not found in the engine (build it with agentbox image build): %w", image, errdefs.ErrInvalid)
	}
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("a container for it exists already: %v: %w", err, errdefs.ErrConflict)
	}
	return fmt.Errorf("creating container: %w", engineErr(err))
}

func isNotFound(err error) bool { return err != nil && cerrdefs.IsNotFound(err) }

// guestEnv is the guest's environment: the manager's, and under runsc no
// prewarmed threads (see guest.PrewarmEnv) and reapers that are not
// subreapers (see guest.SubreaperEnv).
func (b *Backend) guestEnv(env []string) []string {
	out := append([]string{}, env...)
	if b.runtime == RuntimeRunsc {
		out = append(out, guest.PrewarmEnv+"=0", guest.SubreaperEnv+"=0")
	}
	return out
}
