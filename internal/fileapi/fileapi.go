// Package fileapi is the host-side file API on one workspace directory.
//
// The daemon serves read, write, list and search requests on a workspace
// that is, at the same time, the writable root of a sandbox. Whatever the
// sandbox can do to that tree it must be assumed to do, concurrently and in a
// tight loop: plant symlinks to host paths, swap a directory for a symlink
// between two of our system calls, create FIFOs, sockets, huge sparse files,
// very deep trees and directories with millions of entries. The daemon runs as
// root, so any path that leaves the workspace is a host compromise.
//
// The defences, and why each is here:
//
//   - Every path is resolved with [os.Root], which walks the path one
//     component at a time with openat(O_NOFOLLOW) from a directory file
//     descriptor and refuses any symlink or ".." that would leave the root.
//     String prefix checks (strings.HasPrefix(abs, root)) are both wrong for
//     siblings like "ws-evil" and racy against symlink swaps, so there are
//     none here.
//   - [CleanPath] refuses, up front, everything a client has no reason to
//     send (absolute paths, "..", NUL and control bytes, backslashes,
//     over-long names), so os.Root is the second line, not the only one.
//   - Operations that create or replace an entry first open the parent
//     directory once (as its own os.Root) and then act on a single name in
//     that file descriptor, so a swap of a parent component between steps
//     cannot redirect the temporary file, the rename or the cleanup.
//   - Files are opened with O_NONBLOCK and checked with fstat on the open
//     descriptor: opening a FIFO would otherwise block the daemon until the
//     sandbox decides to write, and only the descriptor's own type is free
//     of check-then-use races. Directories are opened as "dir/." or with
//     O_DIRECTORY so that a FIFO swapped in for a directory is refused by the
//     kernel instead of blocking (os.Root.OpenRoot on a FIFO blocks).
//   - Writes go to a fresh O_EXCL|O_NOFOLLOW temporary file that is renamed
//     over the target: a symlink at the target is replaced, never written
//     through, and readers never see a half-written file.
//   - Every loop checks its context and a budget (bytes read, entries listed,
//     entries walked, depth), so a hostile tree costs bounded time and memory.
//
// What os.Root does not stop, and this package accepts: a symlink inside the
// workspace that resolves inside it is followed by Read, Write's parent
// lookup, Mkdir and Rename's parent lookups (the sandbox could read the
// target itself anyway), and a race can make an operation act on a different
// entry of the same workspace. Neither can reach a host path.
package fileapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Defaults for the zero values of Options and GrepRequest.
const (
	DefaultMaxReadBytes   = 64 << 20
	DefaultMaxWriteBytes  = 256 << 20
	DefaultMaxListEntries = 10000

	defaultGrepMatches  = 1000
	maxGrepMatches      = 10000
	defaultGrepFileSize = 4 << 20
	grepTextBytes       = 512
	grepWalkEntries     = 100000
	grepWalkDepth       = 256
	grepMaxPattern      = 4096
	binarySniffBytes    = 8 << 10
	tempPrefix          = ".agentbox-tmp-"
	dirPerm             = 0o755
	defaultFilePerm     = 0o644
)

// Options configures an FS. The zero value is usable; note that UID and GID
// 0 mean "chown to root", so callers that want to leave ownership alone set
// them to -1.
type Options struct {
	// UID and GID own the files and directories the FS creates, when >= 0.
	// They are applied with fchown on the open descriptor, so a swapped
	// path cannot redirect them. -1 leaves the creator's ID.
	UID, GID int
	// MaxReadBytes caps Read (default 64 MiB).
	MaxReadBytes int64
	// MaxWriteBytes caps the body of one Write (default 256 MiB).
	MaxWriteBytes int64
	// MaxListEntries caps the entries one List returns (default 10000).
	MaxListEntries int
}

// FS serves file operations inside one workspace directory. It is safe for
// concurrent use.
type FS struct {
	// root is the only handle on the workspace; every path goes through it.
	root *os.Root
	// opts holds the options with defaults filled in.
	opts Options
	// walkEntries and walkDepth are Grep's walk budget; tests lower them.
	walkEntries int
	walkDepth   int
}

// Open opens dir as a workspace root. dir itself may be reached through
// symlinks; nothing below it will be resolved outside it.
func Open(dir string, opts Options) (*FS, error) {
	if err := supported(); err != nil {
		return nil, fmt.Errorf("opening workspace %s: %w", dir, err)
	}
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = DefaultMaxReadBytes
	}
	if opts.MaxWriteBytes <= 0 {
		opts.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if opts.MaxListEntries <= 0 {
		opts.MaxListEntries = DefaultMaxListEntries
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, classify("opening workspace", dir, err)
	}
	return &FS{root: r, opts: opts, walkEntries: grepWalkEntries, walkDepth: grepWalkDepth}, nil
}

// Close releases the workspace handle. Operations after Close fail.
func (f *FS) Close() error {
	return f.root.Close()
}

// Info describes one entry with lstat semantics. It is the API's FileInfo,
// declared once in apitypes.
type Info = apitypes.FileInfo

// The values of Info.Type.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

func newInfo(p string, fi fs.FileInfo) Info {
	in := Info{
		Path:    p,
		Name:    path.Base(p),
		Size:    fi.Size(),
		Mode:    modeString(fi.Mode()),
		ModTime: fi.ModTime(),
	}
	switch fi.Mode().Type() {
	case 0:
		in.Type = TypeFile
	case fs.ModeDir:
		in.Type = TypeDir
	case fs.ModeSymlink:
		in.Type = TypeSymlink
	default:
		in.Type = TypeOther
	}
	return in
}

func modeString(m fs.FileMode) string {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return fmt.Sprintf("%04o", bits)
}

// openDir opens the directory p of the workspace as its own root. The "/."
// suffix makes os.Root open p with O_DIRECTORY: opening a bare name would
// block forever if the sandbox had swapped a FIFO in for the directory.
func (f *FS) openDir(p string) (*os.Root, error) {
	if p == "." {
		return f.root.OpenRoot(".")
	}
	return f.root.OpenRoot(p + "/.")
}

// chown applies Options.UID/GID to an open descriptor.
func (f *FS) chown(file *os.File) error {
	if f.opts.UID < 0 && f.opts.GID < 0 {
		return nil
	}
	return file.Chown(f.opts.UID, f.opts.GID)
}

// errEscapes replaces os.Root's unexported "path escapes from parent" so the
// message says what happened from the client's point of view.
var errEscapes = errors.New("resolves outside the workspace (through .., an absolute path or a symlink)")

// isEscape reports whether err is os.Root's refusal to leave the root. The
// sentinel is unexported, so its text is the only handle; TestEscapeErrorText
// pins it so a Go upgrade that changes it fails loudly.
func isEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

// classify wraps err from an os or os.Root call with the operation, the
// workspace path and an errdefs class. The system error stays in the chain
// (errors.Is(err, fs.ErrNotExist) still works); the class is what the API
// layer turns into a status code.
func classify(op, p string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s %s: %w", op, p, err)
	}
	if isEscape(err) {
		return fmt.Errorf("%s %s: %w: %w", op, p, errEscapes, errdefs.ErrInvalid)
	}
	inner := err
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		inner = pe.Err
	case errors.As(err, &le):
		inner = le.Err
	}
	var class error
	var errno syscall.Errno
	switch {
	case errors.Is(inner, fs.ErrNotExist):
		class = errdefs.ErrNotFound
	case errors.As(inner, &errno):
		class = errnoClass(errno)
	case inner.Error() == "not a directory":
		// os.Root reports a non-directory root with a plain error.
		class = errdefs.ErrInvalid
	}
	if class == nil {
		return fmt.Errorf("%s %s: %w", op, p, inner)
	}
	return fmt.Errorf("%s %s: %w: %w", op, p, inner, class)
}

// ctxReader fails the copy it feeds once ctx is done, so long copies stop
// between chunks.
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
