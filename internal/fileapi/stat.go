package fileapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Stat describes p with lstat semantics: a symlink is reported as a symlink,
// with its target read but never followed. Symlinks in the components before
// the last are followed only while they stay inside the workspace.
func (f *FS) Stat(ctx context.Context, p string) (Info, error) {
	const op = "stat"
	p, err := cleanFor(op, p)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, classify(op, p, err)
	}
	fi, err := f.root.Lstat(p)
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	in := newInfo(p, fi)
	if in.Type == TypeSymlink {
		// A failed readlink (the link was just replaced) leaves the
		// target empty rather than failing a stat that succeeded.
		in.LinkTarget, _ = f.root.Readlink(p)
	}
	return in, nil
}

// List returns the entries of the directory p, sorted by name, with lstat
// semantics (symlinks are listed with their targets, never followed). If the
// directory holds more than MaxListEntries entries, List returns the first
// MaxListEntries it read, sorted, together with an error wrapping
// ErrTooLarge.
func (f *FS) List(ctx context.Context, p string) ([]Info, error) {
	const op = "listing"
	p, err := cleanFor(op, p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, classify(op, p, err)
	}
	dir, err := f.openDir(p)
	if err != nil {
		return nil, classify(op, p, err)
	}
	defer dir.Close()
	max := f.opts.MaxListEntries
	names, more, err := readNames(ctx, dir, max)
	if err != nil {
		return nil, classify(op, p, err)
	}
	infos := make([]Info, 0, len(names))
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, classify(op, p, err)
		}
		// Names are looked up in the directory descriptor, never by a
		// path from the root, so a swap of p cannot redirect them.
		fi, err := dir.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since readdir
		}
		if err != nil {
			return nil, classify(op, path.Join(p, name), err)
		}
		in := newInfo(path.Join(p, name), fi)
		if in.Type == TypeSymlink {
			in.LinkTarget, _ = dir.Readlink(name)
		}
		infos = append(infos, in)
	}
	if more {
		return infos, fmt.Errorf("%s %s: more than %d entries: %w", op, p, max, errdefs.ErrTooLarge)
	}
	return infos, nil
}

// readNames reads up to max names from dir, sorted, and reports whether
// there were more. It reads in batches so a directory with millions of
// entries costs at most max+1 names of memory.
func readNames(ctx context.Context, dir *os.Root, max int) (names []string, more bool, err error) {
	d, err := dir.OpenFile(".", os.O_RDONLY|oDirectory|oNonblock, 0)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	for len(names) <= max {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		batch, err := d.Readdirnames(min(1024, max+1-len(names)))
		names = append(names, batch...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	if len(names) > max {
		names, more = names[:max], true
	}
	slices.Sort(names)
	return names, more, nil
}
