// Package workspace makes, forks, mounts and inspects the durable file
// trees that tasks work on.
//
// A workspace directory DIR holds:
//
//	DIR/merged   overlay driver: the files (overlay of a pristine checkout)
//	DIR/upper    overlay driver: the workspace's own changes
//	DIR/work     overlay driver: overlayfs scratch
//	DIR/tree     copy driver: the files (a standalone clone)
//	DIR/hostgit  a host-private bare git directory used for diff, status
//	             and commit
//	DIR/disk.img with a disk quota: the workspace's own file system,
//	             mounted at DIR/vol, which then holds upper, work,
//	             merged or tree (see volume.go)
//
// The files contain a normal, standalone git repository (no alternates, no
// worktree links) so git works wherever they are mounted. The host never
// runs git with the workspace's own .git as its git directory: a sandbox
// controls that directory (config, hooks, filters, symlinks) and anything
// the host ran there would be the sandbox's to command. Instead hostgit
// borrows the mirror's objects (alternates), keeps its own index of the
// files, and commits are written back into the workspace's .git through
// os.Root, which never follows a link out of the tree.
package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Driver names.
const (
	Overlay = "overlay"
	Copy    = "copy"
)

// Source says what a new workspace starts from.
type Source struct {
	// Repo is the cached repo (its mirror is Repo.Path).
	Repo store.Repo
	// Commit is the full commit name to check out.
	Commit string
	// Lower is the pristine checkout of Commit (overlay driver only).
	Lower string
	// Branch is the workspace's own branch, checked out at Commit.
	Branch string
	// UID and GID own the workspace's files when >= 0.
	UID, GID int
}

// Driver makes the files of workspaces. Both drivers pass one conformance
// suite (driver_test.go).
type Driver interface {
	// Name is Overlay or Copy.
	Name() string
	// Create makes the files of a new workspace in dir (which exists and
	// is empty) with src.Commit checked out on the new branch src.Branch.
	Create(ctx context.Context, dir string, src Source) error
	// Fork makes dir a copy of the workspace at parentDir, copying only
	// what the driver must (the overlay driver copies the upper layer),
	// with src.Branch checked out at src.Commit (the parent's head) when
	// both are set. src.Lower is the parent's pristine checkout.
	Fork(ctx context.Context, parentDir, dir string, src Source) error
	// Attach makes the files visible at Files(dir); a no-op when they are.
	Attach(ctx context.Context, dir, lower string) error
	// Detach hides the files (unmount); Remove then deletes dir.
	Detach(ctx context.Context, dir string) error
	// Attached reports whether the files are visible.
	Attached(dir string) (bool, error)
	// Files is the host path of the files.
	Files(dir string) string
}

// New returns the driver called name.
func New(name string) (Driver, error) {
	switch name {
	case Overlay:
		return overlayDriver{}, nil
	case Copy:
		return copyDriver{}, nil
	}
	return nil, errdefs.Invalid("workspace driver %q is not one of overlay, copy", name)
}

// Remove detaches the files and deletes dir entirely. A quota volume is
// unmounted whatever d says, so that deleting dir never descends into it.
func Remove(ctx context.Context, d Driver, dir string) error {
	if err := d.Detach(ctx, dir); err != nil {
		return err
	}
	if err := unmountVolume(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// HostGitDir is the host-private git directory of the workspace at dir.
func HostGitDir(dir string) string { return filepath.Join(dir, "hostgit") }
