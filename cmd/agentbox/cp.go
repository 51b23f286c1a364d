package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/ids"
)

// sandboxWorkdir is where the workspace is mounted in a sandbox; remote
// paths under it go through the file API, others through tar in the
// sandbox.
const sandboxWorkdir = "/workspace"

// cpStats counts what a copy wrote.
type cpStats struct {
	Files    int   `json:"files"`
	Dirs     int   `json:"dirs"`
	Symlinks int   `json:"symlinks"`
	Bytes    int64 `json:"bytes"`
}

// remotePath is the WS:PATH or SANDBOX:PATH side of a copy.
type remotePath struct {
	target string // as given: a workspace or sandbox ID
	path   string // absolute, clean
	// dir says PATH ended in a slash: it must name a directory, never a
	// symlink to one, and a copy goes into it or comes from it.
	dir bool
}

func (r remotePath) String() string {
	if r.dir && r.path != "/" {
		return r.target + ":" + r.path + "/"
	}
	return r.target + ":" + r.path
}

// inWorkspace returns the path relative to the workspace root when it is
// inside /workspace.
func (r remotePath) inWorkspace() (string, bool) {
	if r.path == sandboxWorkdir {
		return ".", true
	}
	rel, ok := strings.CutPrefix(r.path, sandboxWorkdir+"/")
	return rel, ok
}

// parseCpArg splits "ws_…:PATH" or "sb_…:PATH"; anything else is a local
// path (write ./a:b for a local name with a colon).
func parseCpArg(s string) (remotePath, bool) {
	target, p, ok := strings.Cut(s, ":")
	if !ok || !(ids.HasPrefix(target, "ws") || ids.HasPrefix(target, "sb")) {
		return remotePath{}, false
	}
	dir := strings.HasSuffix(p, "/")
	if !path.IsAbs(p) {
		p = path.Join(sandboxWorkdir, p)
	}
	return remotePath{target: target, path: path.Clean(p), dir: dir}, true
}

// notADir is why a remote path written with a trailing slash cannot be
// copied into or from: typ is what the path is (a file API type: "file",
// "symlink", "other"), "" when it does not exist.
func notADir(p remotePath, typ string) error {
	switch typ {
	case "":
		return fmt.Errorf("the directory %s does not exist: %w", p.path, errdefs.ErrNotFound)
	case "symlink":
		return errdefs.Invalid("%s is a symlink, not a directory: with a trailing slash the path must be a directory, and no link is followed", p.path)
	case "file":
		return errdefs.Invalid("%s is a file, not a directory: with a trailing slash the path must be a directory", p.path)
	}
	return errdefs.Invalid("%s is not a directory: with a trailing slash the path must be a directory", p.path)
}

// sandboxKind says what p is in the sandbox of target, as a shell there
// sees it: "dir" (link says through a symlink), "file", "other", or
// "none" if nothing is at p, "noparent" if its directory is missing too.
// Used only where tar runs in the sandbox, so that a wrong answer (the
// sandbox is not trusted) stays inside the sandbox.
func sandboxKind(ctx context.Context, cl *client.Client, target, p string) (kind string, link bool, err error) {
	var out bytes.Buffer
	res, err := cl.Exec(ctx, target, client.Exec{Argv: []string{"sh", "-c",
		`if [ -L "$1" ]; then l=symlink; fi
if [ -d "$1" ]; then echo dir $l; elif [ -f "$1" ]; then echo file $l; elif [ -e "$1" ] || [ -L "$1" ]; then echo other $l
elif [ -d "$(dirname "$1")" ]; then echo none; else echo noparent; fi`,
		"sh", p}}, &out, io.Discard)
	if err := execFailure("looking at "+p+" in the sandbox", res, err, ""); err != nil {
		return "", false, err
	}
	f := strings.Fields(out.String())
	if len(f) == 0 || len(f) > 2 || len(f) == 2 && f[1] != "symlink" {
		return "", false, fmt.Errorf("looking at %s in the sandbox: unexpected answer %q", p, out.String())
	}
	switch f[0] {
	case "dir", "file", "other", "none", "noparent":
		return f[0], len(f) == 2, nil
	}
	return "", false, fmt.Errorf("looking at %s in the sandbox: unexpected answer %q", p, out.String())
}

// sandboxDirOnly refuses p, written with a trailing slash, unless
// sandboxKind found a directory there (not a link to one).
func sandboxDirOnly(p remotePath, kind string, link bool) error {
	switch {
	case link:
		return notADir(p, "symlink")
	case kind == "none" || kind == "noparent":
		return notADir(p, "")
	case kind != "dir":
		return notADir(p, kind)
	}
	return nil
}

func (c *cli) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between the host and a workspace's sandbox",
		Long: "Copy a file or a directory tree between the host and a sandbox, docker cp style: one of SRC and DST is " +
			"WS:PATH or SANDBOX:PATH (a relative PATH is under /workspace). An existing directory as DST receives " +
			"SRC under its own name; otherwise DST names the copy. A PATH that ends in a slash must be a " +
			"directory, not a symlink to one: the copy goes into it (or is taken from it), and a symlink, a file " +
			"or nothing there is refused, never replaced or followed.\n\n" +
			"Paths under /workspace go through the workspace file API; other paths (e.g. /tmp) travel as a tar " +
			"stream through an exec of tar in the sandbox. What comes out of a sandbox is checked before it is " +
			"written: no absolute names or .., no links that leave the copied tree, no devices; the copy stops " +
			"with an error at the first such entry, and nothing is ever written outside DST.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, srcRemote := parseCpArg(args[0])
			dst, dstRemote := parseCpArg(args[1])
			if srcRemote == dstRemote {
				return errdefs.Invalid("cp: exactly one of SRC and DST must be WS:PATH or SANDBOX:PATH")
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var st cpStats
			id := src.target
			if srcRemote {
				st, err = c.download(cmd.Context(), cl, src, args[1])
			} else {
				id = dst.target
				st, err = c.upload(cmd.Context(), cl, args[0], dst)
			}
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": id, "from": args[0], "to": args[1], "copied": st}, func(w io.Writer) {
				fmt.Fprintf(w, "copied %d files, %d directories, %d symlinks (%d bytes)\n", st.Files, st.Dirs, st.Symlinks, st.Bytes)
			})
		},
	}
}

// workspaceOf is the workspace of a target.
func workspaceOf(ctx context.Context, cl *client.Client, target string) (string, error) {
	if !ids.HasPrefix(target, "sb") {
		return target, nil
	}
	sb, err := cl.GetSandbox(ctx, target)
	if err != nil {
		return "", err
	}
	return sb.WorkspaceID, nil
}

// --- sandbox to host

func (c *cli) download(ctx context.Context, cl *client.Client, src remotePath, dst string) (cpStats, error) {
	var ws, rel string
	var top client.FileInfo
	viaFiles := false
	if r, ok := src.inWorkspace(); ok {
		var err error
		if ws, err = workspaceOf(ctx, cl, src.target); err != nil {
			return cpStats{}, err
		}
		if top, err = cl.StatFile(ctx, ws, r); err != nil {
			if src.dir && errors.Is(err, client.ErrNotFound) {
				err = notADir(src, "")
			}
			return cpStats{}, fmt.Errorf("copying %s: %w", src, err)
		}
		if src.dir && top.Type != "dir" {
			return cpStats{}, fmt.Errorf("copying %s: %w", src, notADir(src, top.Type))
		}
		rel, viaFiles = r, true
	} else if src.dir {
		kind, link, err := sandboxKind(ctx, cl, src.target, src.path)
		if err == nil {
			err = sandboxDirOnly(src, kind, link)
		}
		if err != nil {
			return cpStats{}, fmt.Errorf("copying %s: %w", src, err)
		}
	}
	srcIsDir := !viaFiles || top.Type == "dir" // a tar source may be either
	sink, err := openLocalSink(dst, path.Base(src.path), srcIsDir && viaFiles)
	if err != nil {
		return cpStats{}, err
	}
	defer sink.root.Close()
	if viaFiles {
		err = sink.fromFiles(ctx, cl, ws, rel, top)
	} else {
		err = c.tarDownload(ctx, cl, src, sink)
	}
	if err != nil {
		return sink.stats, fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return sink.stats, nil
}

// tarDownload runs tar in the sandbox and extracts its stream into sink.
func (c *cli) tarDownload(ctx context.Context, cl *client.Client, src remotePath, sink *localSink) error {
	if src.path == "/" {
		return errdefs.Invalid("copying the whole root of a sandbox is not supported; name a directory")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	extracted := make(chan error, 1)
	go func() {
		err := sink.fromTar(pr, path.Base(src.path))
		if err == nil {
			io.Copy(io.Discard, pr) // tar's trailing padding
		}
		pr.CloseWithError(errors.New("extraction stopped"))
		if err != nil {
			cancel() // stop the sandbox's tar
		}
		extracted <- err
	}()
	var stderr bytes.Buffer
	res, err := cl.Exec(ctx, src.target, client.Exec{
		Argv: []string{"tar", "-c", "-f", "-", "-C", path.Dir(src.path), path.Base(src.path)},
		// The archive is the output: no cap short of absurd.
		MaxOutputBytes: 1 << 50,
	}, pw, &limitedBuffer{buf: &stderr, max: 4 << 10})
	pw.Close()
	if xerr := <-extracted; xerr != nil {
		return xerr
	}
	return execFailure("tar in the sandbox", res, err, stderr.String())
}

// execFailure turns a failed helper exec into one error.
func execFailure(what string, res client.ExecResult, err error, stderr string) error {
	msg := strings.TrimSpace(stderr)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case res.Lost:
		return fmt.Errorf("%s: the sandbox died: %w", what, errdefs.ErrUnavailable)
	case res.StdoutTruncated:
		return fmt.Errorf("%s: its output was cut at the daemon's cap", what)
	case res.ExitCode != 0:
		return fmt.Errorf("%s: exit status %d: %s", what, res.ExitCode, msg)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(b []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// localSink writes one copied tree under a directory of the host, never
// outside it: every name is checked and every operation goes through an
// os.Root, which refuses a path that resolves (through .. or a symlink)
// outside the directory.
type localSink struct {
	root *os.Root
	// top is the name of the copy in root.
	top string
	// links are the symlinks this copy made: no later entry may pass
	// through one. files are the regular files it wrote (hard link targets).
	links map[string]bool
	files map[string]bool
	stats cpStats
}

// openLocalSink resolves a local destination docker cp style: an existing
// directory receives the copy as dir/name; otherwise dst names the copy,
// in a parent directory that must exist.
func openLocalSink(dst, name string, srcIsDir bool) (*localSink, error) {
	dir, top := dst, name
	fi, err := os.Stat(dst)
	switch {
	case errors.Is(err, syscall.ENOTDIR) && strings.HasSuffix(dst, string(filepath.Separator)):
		return nil, errdefs.Invalid("destination %s is not a directory", dst)
	case err == nil && fi.IsDir():
	case err == nil && srcIsDir:
		return nil, errdefs.Invalid("cannot copy a directory onto the file %s", dst)
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if strings.HasSuffix(dst, string(filepath.Separator)) {
			return nil, errdefs.Invalid("destination directory %s does not exist", dst)
		}
		dir, top = filepath.Dir(dst), filepath.Base(dst)
	default:
		return nil, err
	}
	if top == "/" || top == "." || top == ".." {
		return nil, errdefs.Invalid("cannot copy to %s", dst)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("destination %s: %w", dir, err)
	}
	return &localSink{root: root, top: top, links: map[string]bool{}, files: map[string]bool{}}, nil
}

// name checks rel (a slash path inside the copied tree, "" for its top)
// and returns its name in root.
func (s *localSink) name(rel string) (string, error) {
	if rel == "" || rel == "." {
		return s.top, nil
	}
	if strings.Contains(rel, "\\") || !filepath.IsLocal(rel) || path.Clean(rel) != rel {
		return "", fmt.Errorf("refusing entry %q: not a plain relative path inside the copied tree", rel)
	}
	name := path.Join(s.top, rel)
	for p := path.Dir(name); p != "." && p != s.top; p = path.Dir(p) {
		if s.links[p] {
			return "", fmt.Errorf("refusing entry %q: it lies beyond the symlink %q this copy made", rel, p)
		}
	}
	return name, nil
}

// clear removes a non-directory at name so that a new entry replaces it
// instead of writing through it.
func (s *localSink) clear(name string) error {
	fi, err := s.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("refusing to replace the directory %s with a non-directory", name)
	}
	return s.root.Remove(name)
}

func (s *localSink) dir(rel string, mode fs.FileMode) error {
	name, err := s.name(rel)
	if err != nil {
		return err
	}
	fi, err := s.root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
	case err == nil:
		return fmt.Errorf("refusing to replace %s (not a directory) with a directory", name)
	case errors.Is(err, fs.ErrNotExist):
		// The owner keeps write access so that the copy can fill it.
		if err := s.root.MkdirAll(name, mode.Perm()|0o700); err != nil {
			return err
		}
	default:
		return err
	}
	s.stats.Dirs++
	return nil
}

func (s *localSink) file(rel string, mode fs.FileMode, mtime time.Time, r io.Reader) error {
	name, err := s.name(rel)
	if err != nil {
		return err
	}
	if err := s.clear(name); err != nil {
		return err
	}
	// Setuid, setgid and sticky bits are dropped.
	f, err := s.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if !mtime.IsZero() {
		s.root.Chtimes(name, mtime, mtime)
	}
	s.files[name] = true
	s.stats.Files++
	s.stats.Bytes += n
	return nil
}

// symlink makes a link whose target must be relative and stay inside the
// copied tree.
func (s *localSink) symlink(rel, target string) error {
	name, err := s.name(rel)
	if err != nil {
		return err
	}
	resolved := path.Join(path.Dir(name), target)
	if target == "" || path.IsAbs(target) || strings.Contains(target, "\\") ||
		(resolved != s.top && !strings.HasPrefix(resolved, s.top+"/")) {
		return fmt.Errorf("refusing symlink %q -> %q: it points outside the copied tree", rel, target)
	}
	if err := s.clear(name); err != nil {
		return err
	}
	if err := s.root.Symlink(target, name); err != nil {
		return err
	}
	s.links[name] = true
	s.stats.Symlinks++
	return nil
}

// hardlink links rel to a file this copy already wrote.
func (s *localSink) hardlink(rel, target string) error {
	name, err := s.name(rel)
	if err != nil {
		return err
	}
	old, err := s.name(target)
	if err != nil || !s.files[old] {
		return fmt.Errorf("refusing hard link %q -> %q: its target is not a file of this copy", rel, target)
	}
	if err := s.clear(name); err != nil {
		return err
	}
	if err := s.root.Link(old, name); err != nil {
		return err
	}
	s.files[name] = true
	s.stats.Files++
	return nil
}

// fromTar extracts a tar stream whose entries all lie under base (the
// name the sandbox's tar gave the copied path) into the sink.
func (s *localSink) fromTar(r io.Reader, base string) error {
	tr := tar.NewReader(r)
	first := true
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if first {
				return errors.New("the sandbox sent an empty archive")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive from the sandbox: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if path.IsAbs(name) {
			return fmt.Errorf("refusing entry %q: absolute name", h.Name)
		}
		rel, ok := strings.CutPrefix(name, base)
		if !ok || (rel != "" && rel[0] != '/') {
			return fmt.Errorf("refusing entry %q: it is not under the copied path %q", h.Name, base)
		}
		rel = strings.TrimPrefix(rel, "/")
		if first && rel != "" {
			return fmt.Errorf("refusing entry %q: the archive does not start with the copied path", h.Name)
		}
		first = false
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			err = s.dir(rel, mode)
		case tar.TypeReg, tar.TypeRegA:
			err = s.file(rel, mode, h.ModTime, tr)
		case tar.TypeSymlink:
			err = s.symlink(rel, h.Linkname)
		case tar.TypeLink:
			lt, ok := strings.CutPrefix(strings.TrimSuffix(h.Linkname, "/"), base+"/")
			if !ok {
				return fmt.Errorf("refusing hard link %q -> %q: its target is not under the copied path", h.Name, h.Linkname)
			}
			err = s.hardlink(rel, lt)
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			err = fmt.Errorf("refusing entry %q: devices and FIFOs are not copied", h.Name)
		default:
			err = fmt.Errorf("refusing entry %q: unsupported tar entry type %q", h.Name, string(h.Typeflag))
		}
		if err != nil {
			return err
		}
	}
}

// fromFiles copies a workspace path through the file API.
func (s *localSink) fromFiles(ctx context.Context, cl *client.Client, ws, wsPath string, info client.FileInfo) error {
	return s.fromFilesAt(ctx, cl, ws, wsPath, "", info)
}

func (s *localSink) fromFilesAt(ctx context.Context, cl *client.Client, ws, wsPath, rel string, info client.FileInfo) error {
	mode := parseMode(info.Mode)
	switch info.Type {
	case "file":
		pr, pw := io.Pipe()
		go func() {
			_, err := cl.ReadFile(ctx, ws, wsPath, pw)
			pw.CloseWithError(err)
		}()
		err := s.file(rel, mode, info.ModTime, pr)
		pr.CloseWithError(errors.New("copy stopped"))
		return err
	case "symlink":
		return s.symlink(rel, info.LinkTarget)
	case "dir":
		if err := s.dir(rel, mode); err != nil {
			return err
		}
		entries, err := cl.ListFiles(ctx, ws, wsPath)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := s.fromFilesAt(ctx, cl, ws, path.Join(wsPath, e.Name), path.Join(rel, e.Name), e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("refusing %s: not a file, directory or symlink", wsPath)
}

func parseMode(s string) fs.FileMode {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0o644
	}
	return fs.FileMode(n).Perm()
}

// --- host to sandbox

// localEntry is one entry of a local tree to upload.
type localEntry struct {
	rel  string // slash path under the copied tree, "" for its top
	path string // host path
	info fs.FileInfo
	link string // symlink target
}

// walkLocal lists a local tree without following symlinks below its top.
func walkLocal(src string) ([]localEntry, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return nil, errdefs.Invalid("cannot copy %s: not a file, directory or symlink", src)
		}
		return []localEntry{{path: src, info: fi}}, nil
	}
	var out []localEntry
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			rel = ""
		}
		info, err := d.Info()
		if p == src {
			info, err = fi, nil // the top may be reached through a symlink
		}
		if err != nil {
			return err
		}
		e := localEntry{rel: filepath.ToSlash(rel), path: p, info: info}
		switch {
		case info.IsDir(), info.Mode().IsRegular():
		case info.Mode()&fs.ModeSymlink != 0:
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return errdefs.Invalid("cannot copy %s: not a file, directory or symlink", p)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

func (c *cli) upload(ctx context.Context, cl *client.Client, src string, dst remotePath) (cpStats, error) {
	entries, err := walkLocal(src)
	if err != nil {
		return cpStats{}, fmt.Errorf("copying %s: %w", src, err)
	}
	srcIsDir := entries[0].info.IsDir()
	hasLinks := false
	for _, e := range entries {
		hasLinks = hasLinks || e.link != ""
	}
	rel, inWS := dst.inWorkspace()
	var st cpStats
	if inWS && !hasLinks {
		// The file API cannot make symlinks: a tree with some goes
		// through tar like any other path.
		st, err = uploadFiles(ctx, cl, entries, src, dst, rel, srcIsDir)
	} else {
		st, err = c.tarUpload(ctx, cl, entries, src, dst, srcIsDir)
	}
	if err != nil {
		return st, fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return st, nil
}

func uploadFiles(ctx context.Context, cl *client.Client, entries []localEntry, src string, dst remotePath, rel string, srcIsDir bool) (cpStats, error) {
	var st cpStats
	ws, err := workspaceOf(ctx, cl, dst.target)
	if err != nil {
		return st, err
	}
	top := rel
	fi, err := cl.StatFile(ctx, ws, rel)
	switch {
	case dst.dir && errors.Is(err, client.ErrNotFound):
		return st, notADir(dst, "")
	case dst.dir && err == nil && fi.Type != "dir":
		// Never replaced, never written through.
		return st, notADir(dst, fi.Type)
	case err == nil && fi.Type == "dir":
		top = path.Join(rel, filepath.Base(src))
	case err == nil && srcIsDir:
		return st, errdefs.Invalid("cannot copy a directory onto the file %s", dst)
	case err == nil:
	case errors.Is(err, client.ErrNotFound):
		parent := path.Dir(rel)
		if pfi, perr := cl.StatFile(ctx, ws, parent); perr != nil || pfi.Type != "dir" {
			return st, fmt.Errorf("the directory %s does not exist: %w", path.Join(sandboxWorkdir, parent), errdefs.ErrNotFound)
		}
	default:
		return st, err
	}
	for _, e := range entries {
		p := path.Join(top, e.rel)
		if e.info.IsDir() {
			if _, err := cl.Mkdir(ctx, ws, p, true); err != nil {
				return st, err
			}
			st.Dirs++
			continue
		}
		f, err := os.Open(e.path)
		if err != nil {
			return st, err
		}
		info, err := cl.WriteFile(ctx, ws, p, f, e.info.Mode().Perm(), false)
		f.Close()
		if err != nil {
			return st, err
		}
		st.Files++
		st.Bytes += info.Size
	}
	return st, nil
}

// tarUpload streams the tree as a tar archive to tar in the sandbox.
func (c *cli) tarUpload(ctx context.Context, cl *client.Client, entries []localEntry, src string, dst remotePath, srcIsDir bool) (cpStats, error) {
	var st cpStats
	// Where does the copy land: in an existing directory under its own
	// name, else as dst itself.
	kind, link, err := sandboxKind(ctx, cl, dst.target, dst.path)
	if err != nil {
		return st, err
	}
	if dst.dir {
		if err := sandboxDirOnly(dst, kind, link); err != nil {
			return st, err
		}
	}
	dir, name := path.Dir(dst.path), path.Base(dst.path)
	switch kind {
	case "dir":
		dir, name = dst.path, filepath.Base(src)
	case "file", "other":
		if srcIsDir {
			return st, errdefs.Invalid("cannot copy a directory onto the file %s", dst)
		}
	case "none":
	case "noparent":
		return st, fmt.Errorf("the directory %s does not exist: %w", dir, errdefs.ErrNotFound)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeTar(pw, entries, name, &st))
	}()
	var stderr bytes.Buffer
	res, err := cl.ExecStdin(ctx, dst.target, client.Exec{Argv: []string{"tar", "-x", "-f", "-", "-C", dir}},
		pr, io.Discard, &limitedBuffer{buf: &stderr, max: 4 << 10})
	pr.CloseWithError(errors.New("the sandbox's tar ended"))
	return st, execFailure("tar in the sandbox", res, err, stderr.String())
}

// writeTar writes entries as an archive whose top is name.
func writeTar(w io.Writer, entries []localEntry, name string, st *cpStats) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: path.Join(name, e.rel), Mode: int64(e.info.Mode().Perm()), ModTime: e.info.ModTime(), Format: tar.FormatPAX}
		switch {
		case e.info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			st.Dirs++
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
			st.Symlinks++
		default:
			h.Typeflag, h.Size = tar.TypeReg, e.info.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		f, err := os.Open(e.path)
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		st.Files++
		st.Bytes += n
	}
	return tw.Close()
}
