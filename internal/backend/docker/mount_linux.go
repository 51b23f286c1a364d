package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/hostbind"
)

// workspaceSource returns the host path to bind at /workspace for sandbox
// id (see package hostbind), and how to release what was made for it.
func (b *Backend) workspaceSource(id, files string) (string, func() error, error) {
	return hostbind.Workspace(b.bindPath(id), files, sameMountNamespaceAsEngine)
}

// bindPath is the directory of the workspace binds of sandbox id.
func (b *Backend) bindPath(id string) string { return filepath.Join(b.mountDir, id) }

// releaseBind removes the workspace binds of sandbox id, if there are any.
func (b *Backend) releaseBind(id string) error {
	if id == "" || strings.ContainsRune(id, '/') {
		return nil
	}
	return unmountAndRemove(b.bindPath(id))
}

// sweepBinds releases the workspace binds whose sandbox has no container
// any more (removed from outside the daemon), except those of a create
// under way.
func (b *Backend) sweepBinds(ctx context.Context) error {
	entries, err := os.ReadDir(b.mountDir)
	if errors.Is(err, os.ErrNotExist) || len(entries) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	live, err := b.List(ctx, nil)
	if err != nil {
		return err
	}
	alive := make(map[string]bool, len(live))
	for _, info := range live {
		alive[info.ID] = true
	}
	var errs []error
	for _, e := range entries {
		id := e.Name()
		if strings.HasPrefix(id, ".") || alive[id] || b.isCreating(id) {
			continue
		}
		errs = append(errs, unmountAndRemove(b.bindPath(id)))
	}
	return errors.Join(errs...)
}

// unmountAndRemove detaches every mount at or below mp and removes the
// directories.
func unmountAndRemove(mp string) error { return hostbind.UnmountAndRemove(mp) }

// dockerPidFile is where dockerd writes its pid by default.
const dockerPidFile = "/var/run/docker.pid"

// sameMountNamespaceAsEngine refuses to make a workspace bind that a local
// dockerd would not see because this process runs in another mount
// namespace (a systemd unit with PrivateTmp=, say): the engine would bind
// the empty directory under it instead. When the engine's namespace cannot
// be read the bind goes ahead.
func sameMountNamespaceAsEngine() error {
	pidText, err := os.ReadFile(dockerPidFile)
	if err != nil {
		return nil
	}
	pid := strings.TrimSpace(string(pidText))
	if comm, err := os.ReadFile("/proc/" + pid + "/comm"); err != nil || strings.TrimSpace(string(comm)) != "dockerd" {
		return nil
	}
	engine, err1 := os.Readlink("/proc/" + pid + "/ns/mnt")
	self, err2 := os.Readlink("/proc/self/ns/mnt")
	if err1 != nil || err2 != nil {
		return nil
	}
	if self != engine {
		return fmt.Errorf("this process runs in another mount namespace than dockerd (pid %s), which would not see a workspace bind made here; "+
			"run it in the host's mount namespace or put workspaces on a nosuid,nodev mount (the overlay driver does): %w", pid, errdefs.ErrUnavailable)
	}
	return nil
}

// maskName is the file under MountDir that masks device nodes. Sandbox ids
// never start with a dot, so the sweep of workspace binds passes it by.
const maskName = ".mask"

// maskFile returns an empty root-owned file of mode 0000, made once, to bind
// over device nodes that a sandbox must not open: a non-root user without
// capabilities gets EACCES from it, whatever the node was.
func (b *Backend) maskFile() (string, error) {
	p := filepath.Join(b.mountDir, maskName)
	if fi, err := os.Lstat(p); err == nil && isMask(fi) {
		return p, nil
	}
	if err := os.MkdirAll(b.mountDir, 0o700); err != nil {
		return "", fmt.Errorf("mask file: %w", err)
	}
	tmp, err := os.CreateTemp(b.mountDir, maskName+".tmp-")
	if err != nil {
		return "", fmt.Errorf("mask file: %w", err)
	}
	tmp.Close()
	if err := os.Chmod(tmp.Name(), 0); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("mask file: %w", err)
	}
	// A rename replaces whatever stood there (a file of another mode, a
	// symlink) in one step, and concurrent creates all end with a mask.
	if err := os.Rename(tmp.Name(), p); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("mask file: %w", err)
	}
	return p, nil
}

func isMask(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && fi.Mode().Perm() == 0 && fi.Size() == 0 && st.Uid == 0
}
