package manager

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/agentbox/agentbox/internal/anonmount"
	"github.com/agentbox/agentbox/internal/mountinfo"
)

// A sandbox reads its mount table, and a bind of a host directory or file
// shows there as the path it has on its file system (SECURITY.md H45). So
// the two host paths every backend binds into a sandbox, its run directory
// and the guest binary, are handed over on mounts of their own: the run
// directory is a small tmpfs (a bind of it shows as "/"), and the guest
// is the same file seen through a read-only overlay view of its directory
// (a bind of it shows as "/agentbox-guest"). Both mounts are taken off the
// host once the backend's Create has returned, when the environment holds
// copies of them: nothing of a live sandbox's run directory is then
// reachable from the host but through the listening sockets the daemon
// holds, and removing the sandbox's directory is a plain removal again.
// A crash between the two leaves them mounted; the next start detaches
// them (detachLeftovers) before it removes what the crash left.

// The tmpfs of a run directory holds a few sockets and a CA bundle.
const (
	runDirBytes = 1 << 20
	runDirFiles = 256
)

// guestView is the mount point, in a sandbox's directory, of the view of
// the guest binary's directory.
const guestView = "guest"

// hidden is what hideHostPaths made for one sandbox.
type hidden struct {
	// guest is the guest binary to hand the backend.
	guest string
	// detach takes the mounts off the host; it may be called more than
	// once, from several goroutines, and returns when they are off.
	detach func()
}

// hideHostPaths mounts a tmpfs on runDir (which exists, with the mode and
// owner the sandbox needs, and is empty) and a view of the guest binary's
// directory at dir/guest. Where a mount cannot be made (no privilege, no
// overlayfs) the plain path serves, and the daemon's log says once that
// sandboxes see host paths.
func (m *Manager) hideHostPaths(ctx context.Context, dir, runDir string) hidden {
	guest := m.cfg.GuestBinary
	var mounted []string
	if err := anonmount.Tmpfs(runDir, runDirBytes, runDirFiles); err != nil {
		m.warnHostPaths(ctx, "run directory", err)
	} else {
		mounted = append(mounted, runDir)
	}
	view := filepath.Join(dir, guestView)
	// The view shows links as they are: resolve the binary's first, or
	// a bind of the view's link would resolve it on the host.
	real, err := filepath.EvalSymlinks(guest)
	if err == nil {
		if err = os.Mkdir(view, 0o700); err == nil {
			if err = anonmount.View(view, filepath.Dir(real)); err != nil {
				os.Remove(view)
			}
		}
	}
	if err != nil {
		m.warnHostPaths(ctx, "guest binary", err)
	} else {
		mounted = append(mounted, view)
		guest = filepath.Join(view, filepath.Base(real))
	}
	var once sync.Once
	return hidden{guest: guest, detach: func() {
		once.Do(func() {
			for _, p := range mounted {
				if err := anonmount.Detach(p); err != nil {
					m.log.WarnContext(ctx, "taking a sandbox's mount off the host", "path", p, "err", err)
				}
			}
			os.Remove(view) // empty once detached
		})
	}}
}

// warnHostPaths logs, once per daemon and thing, that sandboxes see a
// host path.
func (m *Manager) warnHostPaths(ctx context.Context, what string, err error) {
	if _, done := m.hostPathWarned.LoadOrStore(what, true); !done {
		m.log.WarnContext(ctx, "sandboxes will see the host path of their "+what+" in their mount table", "err", err)
	}
}

// detachLeftovers detaches what a crash left mounted in the directories
// of sandboxes and pooled environments (see hideHostPaths), so that
// removing them removes plain directories. Only at start: nothing else is
// ever mounted there, and no create is under way yet.
func (m *Manager) detachLeftovers(ctx context.Context) {
	for _, dir := range []string{filepath.Join(m.cfg.DataDir, "sandboxes"), m.poolDir()} {
		pts, err := mountinfo.Under(dir)
		if err != nil {
			m.log.WarnContext(ctx, "reading the mount table", "err", err)
			return
		}
		for _, p := range pts {
			if err := anonmount.Detach(p); err != nil {
				m.log.WarnContext(ctx, "detaching a mount left by a previous run", "path", p, "err", err)
			}
		}
	}
}
