package fileapi

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Remove deletes p. A symlink is removed itself, never its target. A
// directory must be empty unless recursive (ErrConflict otherwise). The
// workspace root cannot be removed; a missing p is ErrNotFound.
//
// The recursive case is os.Root.RemoveAll, which descends with
// openat(O_NOFOLLOW|O_DIRECTORY) from the parent's descriptor and unlinks
// symlinks without following them, so a swap cannot send it outside the
// workspace. It does not observe ctx once started.
func (f *FS) Remove(ctx context.Context, p string, recursive bool) error {
	const op = "removing"
	p, err := cleanFor(op, p)
	if err != nil {
		return err
	}
	if p == "." {
		return fmt.Errorf("%s %s: is the workspace root: %w", op, p, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return classify(op, p, err)
	}
	// RemoveAll succeeds on a missing path; the API reports it.
	if _, err := f.root.Lstat(p); err != nil {
		return classify(op, p, err)
	}
	if recursive {
		err = f.root.RemoveAll(p)
	} else {
		err = f.root.Remove(p)
	}
	return classify(op, p, err)
}

// Rename moves from to to, replacing a file (or symlink) at to. Symlinks in
// the components before the last of either path are followed only inside
// the workspace; a symlink named by from is moved itself. Renaming onto an
// existing directory is ErrConflict; the root cannot be either side.
func (f *FS) Rename(ctx context.Context, from, to string) error {
	const op = "renaming"
	from, err := cleanFor(op, from)
	if err != nil {
		return err
	}
	to, err = cleanFor(op, to)
	if err != nil {
		return err
	}
	if from == "." || to == "." {
		return fmt.Errorf("%s %s to %s: the workspace root cannot be renamed or replaced: %w", op, from, to, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return classify(op, from, err)
	}
	return classify(op, from+" to "+to, f.root.Rename(from, to))
}
