// Package archive unpacks the tar streams clients upload (ws create
// --from) into a fresh host directory, refusing what no directory tree of
// regular files, directories and symlinks can hold (SECURITY.md C19).
//
// The stream comes from a client and is hostile until proven otherwise.
// Every name is checked before anything is made: no absolute name, no
// "..", no control byte or backslash, no .git component, no name given
// twice, no entry under a symlink or a file the archive made earlier (so a
// "link, then a file through it" pair cannot write anywhere the link
// points). Hard links, devices, FIFOs and anything else that is not a
// regular file, a directory or a symlink are refused, with the entry
// named. Nothing of the archive's ownership or special mode bits is kept:
// files are 0644, or 0755 when any execute bit was set, directories 0755.
// Everything is made through an os.Root of the destination with O_EXCL and
// O_NOFOLLOW, and the entry count and the bytes written are bounded, so a
// bomb of many small entries or of one huge one stops at its limit.
package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

// Default limits of an Extract.
const (
	DefaultMaxEntries = 200_000
	DefaultMaxBytes   = 1 << 30
	maxLinkTarget     = 4096
)

// Limits bound an Extract; zero fields take the defaults.
type Limits struct {
	// MaxEntries caps the entries (files, directories, symlinks).
	MaxEntries int
	// MaxBytes caps the bytes of all files together.
	MaxBytes int64
}

// Stats counts what an Extract made.
type Stats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}

// Extract unpacks the tar stream r into dir, an existing empty directory
// only the caller uses. It fails with ErrInvalid on an entry it refuses
// (naming it) or a stream that is not a tar archive, with ErrTooLarge past
// lim, and then leaves dir partly filled for the caller to remove.
func Extract(ctx context.Context, r io.Reader, dir string, lim Limits) (Stats, error) {
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultMaxEntries
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	x := extractor{root: root, lim: lim, kind: map[string]byte{}}
	tr := tar.NewReader(r)
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return x.st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return x.st, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return x.st, ctx.Err()
			}
			return x.st, errdefs.Invalid("reading the archive (entry %d): %v", n, err)
		}
		if n > lim.MaxEntries {
			return x.st, fmt.Errorf("the archive has more than %d entries: %w", lim.MaxEntries, errdefs.ErrTooLarge)
		}
		if err := x.entry(ctx, hdr, tr); err != nil {
			return x.st, err
		}
	}
}

// Kinds of names made so far.
const (
	kindDir  = 'd'
	kindFile = 'f'
	kindLink = 'l'
)

type extractor struct {
	root *os.Root
	lim  Limits
	st   Stats
	// kind records every name made (or implied as a parent) so far.
	kind map[string]byte
}

func (x *extractor) entry(ctx context.Context, hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // metadata for the entries after it; nothing to make
	}
	raw := hdr.Name
	bad := func(why string) error { return errdefs.Invalid("archive entry %s: %s", quote(raw), why) }
	if strings.HasPrefix(raw, "/") {
		return bad("absolute name")
	}
	name := strings.TrimSuffix(strings.TrimPrefix(raw, "./"), "/")
	if name == "" || name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the archive's root itself
		}
		return bad("empty name")
	}
	clean, err := fileapi.CleanPath(name)
	if err != nil {
		return bad(strings.TrimSuffix(strings.TrimPrefix(err.Error(), "invalid path "), ": invalid"))
	}
	parts := strings.Split(clean, "/")
	for i, part := range parts {
		if strings.EqualFold(part, ".git") {
			return bad("a .git directory cannot be uploaded (the workspace gets a repository of its own)")
		}
		if i == len(parts)-1 {
			break
		}
		parent := strings.Join(parts[:i+1], "/")
		switch x.kind[parent] {
		case kindLink:
			return bad(fmt.Sprintf("lies under %s, which the archive made a symlink", parent))
		case kindFile:
			return bad(fmt.Sprintf("lies under %s, which the archive made a file", parent))
		}
	}
	if k, ok := x.kind[clean]; ok {
		if k == kindDir && hdr.Typeflag == tar.TypeDir {
			return nil // a directory named again, or after its contents
		}
		return bad("the name is given twice")
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink:
	case tar.TypeLink:
		return bad("hard links are not accepted")
	case tar.TypeChar, tar.TypeBlock:
		return bad("device nodes are not accepted")
	case tar.TypeFifo:
		return bad("FIFOs are not accepted")
	default:
		return bad(fmt.Sprintf("entry type %q is not a file, a directory or a symlink", hdr.Typeflag))
	}
	// Parents, then the entry, each name made once.
	for i := range len(parts) - 1 {
		parent := strings.Join(parts[:i+1], "/")
		if x.kind[parent] == kindDir {
			continue
		}
		if err := x.root.Mkdir(parent, 0o755); err != nil {
			return bad(fmt.Sprintf("making %s: %v", parent, errText(err)))
		}
		x.kind[parent] = kindDir
		x.st.Dirs++
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(clean, 0o755); err != nil {
			return bad(errText(err))
		}
		x.kind[clean] = kindDir
		x.st.Dirs++
	case tar.TypeSymlink:
		switch t := hdr.Linkname; {
		case t == "":
			return bad("symlink with an empty target")
		case len(t) > maxLinkTarget || strings.IndexByte(t, 0) >= 0:
			return bad("symlink target over 4096 bytes or with a NUL byte")
		}
		if err := x.root.Symlink(hdr.Linkname, clean); err != nil {
			return bad(errText(err))
		}
		x.kind[clean] = kindLink
		x.st.Symlinks++
	default:
		perm := os.FileMode(0o644)
		if hdr.Mode&0o111 != 0 {
			perm = 0o755
		}
		if hdr.Size < 0 || hdr.Size > x.lim.MaxBytes-x.st.Bytes {
			return fmt.Errorf("archive entry %s: the files are over %d bytes: %w", quote(raw), x.lim.MaxBytes, errdefs.ErrTooLarge)
		}
		f, err := x.root.OpenFile(clean, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, perm)
		if err != nil {
			return bad(errText(err))
		}
		x.kind[clean] = kindFile
		n, err := io.Copy(f, ctxReader{ctx, io.LimitReader(r, hdr.Size)})
		if err == nil {
			err = f.Chmod(perm) // past the umask
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		x.st.Bytes += n
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.ErrUnexpectedEOF) || n < hdr.Size {
				return bad("the archive ends inside it")
			}
			return fmt.Errorf("archive entry %s: writing it: %w", quote(raw), err)
		}
		x.st.Files++
	}
	return nil
}

// errText is the system's reason in err, without the path (a host path).
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	return err.Error()
}

func quote(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%q... (%d bytes)", s[:80], len(s))
	}
	return fmt.Sprintf("%q", s)
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
