package fileapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Mkdir creates the directory p, owned as Options.UID/GID with mode 0755.
// Without parents, an existing entry at p is ErrConflict and a missing
// parent ErrNotFound. With parents, missing ancestors are created too and an
// existing directory at p is not an error.
func (f *FS) Mkdir(ctx context.Context, p string, parents bool) (Info, error) {
	const op = "creating directory"
	p, err := cleanFor(op, p)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, classify(op, p, err)
	}
	if p != "." && parents {
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			if err := f.mkdirs(ctx, p[:i]); err != nil {
				return Info{}, fmt.Errorf("%s %s: %w", op, p, err)
			}
		}
	}
	var fi fs.FileInfo
	if p != "." {
		fi, err = f.mkdirOne(p)
	}
	if p == "." || errors.Is(err, fs.ErrExist) {
		if !parents {
			return Info{}, fmt.Errorf("%s %s: already exists: %w", op, p, errdefs.ErrConflict)
		}
		fi, err = f.root.Stat(p)
		if err == nil && !fi.IsDir() {
			return Info{}, fmt.Errorf("%s %s: exists and is not a directory: %w", op, p, errdefs.ErrConflict)
		}
	}
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	return newInfo(p, fi), nil
}

// mkdirs creates every missing directory on the way to dir (inclusive). Each
// component is resolved by os.Root from the workspace root, so a component
// that is (or becomes) a symlink out of the workspace stops the walk.
func (f *FS) mkdirs(ctx context.Context, dir string) error {
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		prefix := dir[:i]
		if _, err := f.mkdirOne(prefix); err != nil && !errors.Is(err, fs.ErrExist) {
			return classify("creating", prefix, err)
		}
	}
	return nil
}

// mkdirOne creates p and sets its owner and mode through a descriptor. It
// returns an error wrapping fs.ErrExist if p exists (as anything).
func (f *FS) mkdirOne(p string) (fs.FileInfo, error) {
	if err := f.root.Mkdir(p, dirPerm); err != nil {
		return nil, err
	}
	// The sandbox may have replaced the new directory by now; O_DIRECTORY
	// keeps a FIFO from blocking us and os.Root keeps us inside. The worst
	// case is chowning another directory of the workspace to its own user.
	d, err := f.root.OpenFile(p, os.O_RDONLY|oDirectory|oNonblock, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if err := f.chown(d); err != nil {
		return nil, err
	}
	if err := d.Chmod(dirPerm); err != nil {
		return nil, err
	}
	return d.Stat()
}
