package fileapi

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Read copies the regular file at p to w. Symlinks that stay inside the
// workspace are followed; anything else (FIFO, socket, device, directory) is
// refused without blocking. A file over MaxReadBytes is refused with
// ErrTooLarge before anything is written; a file that grows past the cap
// while being copied stops at the cap and also fails with ErrTooLarge, after
// w has received MaxReadBytes bytes.
//
// The returned Info describes the open file; its Size is the number of bytes
// written to w.
func (f *FS) Read(ctx context.Context, p string, w io.Writer) (Info, error) {
	const op = "reading"
	p, err := cleanFor(op, p)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, classify(op, p, err)
	}
	// Check before opening so that a device node is never opened at all in
	// the ordinary case; the fstat below is what the decision rests on.
	fi, err := f.root.Stat(p)
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	if err := f.readable(op, p, fi); err != nil {
		return Info{}, err
	}
	file, err := f.root.OpenFile(p, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	defer file.Close()
	fi, err = file.Stat()
	if err != nil {
		return Info{}, classify(op, p, err)
	}
	if err := f.readable(op, p, fi); err != nil {
		return Info{}, err
	}
	info := newInfo(p, fi)

	limit := f.opts.MaxReadBytes
	n, err := io.Copy(w, io.LimitReader(ctxReader{ctx, file}, limit))
	info.Size = n
	if err != nil {
		return info, classify(op, p, err)
	}
	if n == limit {
		var probe [1]byte
		if m, _ := file.Read(probe[:]); m > 0 {
			return info, fmt.Errorf("%s %s: grew past the %d-byte read limit: %w", op, p, limit, errdefs.ErrTooLarge)
		}
	}
	return info, nil
}

func (f *FS) readable(op, p string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s: not a regular file (%s): %w", op, p, newInfo(p, fi).Type, errdefs.ErrInvalid)
	}
	if fi.Size() > f.opts.MaxReadBytes {
		return fmt.Errorf("%s %s: %d bytes exceeds the %d-byte read limit: %w", op, p, fi.Size(), f.opts.MaxReadBytes, errdefs.ErrTooLarge)
	}
	return nil
}
