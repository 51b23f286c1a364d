package fileapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Write replaces the file at p with the contents of r, atomically and
// durably: the data goes to a new temporary file in the target's directory,
// which is fsynced, given its owner and mode through the descriptor, renamed
// over p, and the directory is fsynced before Write returns. A symlink at p
// is replaced by the file, never written through. A directory at p is
// refused with ErrConflict.
//
// mode holds permission bits only (0 keeps an existing file's permissions,
// else 0644). parents creates missing parent directories, owned as
// Options.UID/GID. A body over MaxWriteBytes fails with ErrTooLarge and
// leaves p untouched. A p that ends in a slash names a directory, never a
// file: it is refused with ErrInvalid (cleaning it would name, and replace,
// whatever is there without the slash, a symlink included).
func (f *FS) Write(ctx context.Context, p string, r io.Reader, mode fs.FileMode, parents bool) (Info, error) {
	const op = "writing"
	slash := strings.HasSuffix(p, "/")
	p, err := cleanFor(op, p)
	if err != nil {
		return Info{}, err
	}
	if slash {
		return Info{}, fmt.Errorf("%s %s/: the path ends in a slash, which names a directory, not a file: %w", op, p, errdefs.ErrInvalid)
	}
	if p == "." {
		return Info{}, fmt.Errorf("%s %s: is the workspace root: %w", op, p, errdefs.ErrConflict)
	}
	if mode&^fs.ModePerm != 0 {
		return Info{}, fmt.Errorf("%s %s: mode %#o has bits beyond 0777: %w", op, p, uint32(mode), errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, classify(op, p, err)
	}
	dir, base := path.Dir(p), path.Base(p)
	if parents && dir != "." {
		if err := f.mkdirs(ctx, dir); err != nil {
			return Info{}, fmt.Errorf("%s %s: %w", op, p, err)
		}
	}
	// From here on every step names base inside this one directory
	// descriptor, so the sandbox swapping a component of dir cannot move
	// the temporary file, the rename or the cleanup anywhere else.
	parent, err := f.openDir(dir)
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	defer parent.Close()

	perm := mode
	switch fi, err := parent.Lstat(base); {
	case err == nil && fi.IsDir():
		return Info{}, fmt.Errorf("%s %s: is a directory: %w", op, p, errdefs.ErrConflict)
	case err == nil && perm == 0 && fi.Mode().IsRegular():
		perm = fi.Mode().Perm()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return Info{}, classify(op, p, err)
	}
	if perm == 0 {
		perm = defaultFilePerm
	}

	tmpName, err := tempName()
	if err != nil {
		return Info{}, fmt.Errorf("%s %s: %w", op, p, err)
	}
	tmp, err := parent.OpenFile(tmpName, os.O_CREATE|os.O_EXCL|os.O_WRONLY|oNofollow, 0o600)
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	committed, closed := false, false
	defer func() {
		if !closed {
			tmp.Close()
		}
		if !committed {
			parent.Remove(tmpName)
		}
	}()

	limit := f.opts.MaxWriteBytes
	n, err := io.Copy(tmp, io.LimitReader(ctxReader{ctx, r}, limit+1))
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	if n > limit {
		return Info{}, fmt.Errorf("%s %s: body exceeds the %d-byte write limit: %w", op, p, limit, errdefs.ErrTooLarge)
	}
	if err := f.chown(tmp); err != nil {
		return Info{}, classify(op, p, err)
	}
	// After chown, which may clear mode bits; also undoes the umask.
	if err := tmp.Chmod(perm); err != nil {
		return Info{}, classify(op, p, err)
	}
	if err := tmp.Sync(); err != nil {
		return Info{}, classify(op, p, err)
	}
	fi, err := tmp.Stat()
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	closed = true
	if err := tmp.Close(); err != nil {
		return Info{}, classify(op, p, err)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, classify(op, p, err)
	}
	if err := parent.Rename(tmpName, base); err != nil {
		return Info{}, classify(op, p, err)
	}
	committed = true
	if err := syncDir(parent); err != nil {
		return Info{}, classify(op, p, err)
	}
	return newInfo(p, fi), nil
}

// tempName returns a name no sandbox can predict, so it cannot pre-plant
// anything there (O_EXCL would refuse it anyway, but would fail the write).
func tempName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("naming temporary file: %w", err)
	}
	return tempPrefix + hex.EncodeToString(b[:]), nil
}

func syncDir(r *os.Root) error {
	d, err := r.OpenFile(".", os.O_RDONLY|oDirectory, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
