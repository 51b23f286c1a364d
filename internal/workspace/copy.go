package workspace

import (
	"context"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/repocache"
)

// copyDriver keeps each workspace as a standalone clone of the mirror. It
// works on any file system; creation and fork cost grows with the repo.
type copyDriver struct{}

func (copyDriver) Name() string            { return Copy }
func (copyDriver) Files(dir string) string { return filepath.Join(dir, "tree") }

func (d copyDriver) Create(ctx context.Context, dir string, src Source) error {
	if err := repocache.CheckoutRepo(ctx, src.Repo, src.Commit, d.Files(dir), src.UID, src.GID); err != nil {
		return err
	}
	if src.Branch == "" {
		return nil
	}
	return SetBranch(ctx, d.Files(dir), src.Branch, src.Commit, src.UID, src.GID)
}

func (d copyDriver) Fork(ctx context.Context, parentDir, dir string, src Source) error {
	if err := copyTree(ctx, d.Files(filesRoot(parentDir)), d.Files(dir)); err != nil {
		return err
	}
	return d.finishFork(ctx, dir, src)
}

// finishFork sets the branch of a fork whose tree at dir is a copy of the
// parent's.
func (d copyDriver) finishFork(ctx context.Context, dir string, src Source) error {
	if src.Branch == "" || src.Commit == "" {
		return nil
	}
	return SetBranch(ctx, d.Files(dir), src.Branch, src.Commit, src.UID, src.GID)
}

func (copyDriver) Attach(context.Context, string, string) error { return nil }
func (copyDriver) Detach(context.Context, string) error         { return nil }

func (d copyDriver) Attached(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(d.Files(dir), ".git"))
	if os.IsNotExist(err) {
		return false, nil
	}
	return err == nil, err
}
