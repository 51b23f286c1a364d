package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
	"github.com/agentbox/agentbox/internal/gitx"
)

var shaRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// InitHostGit creates the host-private git directory of the workspace at
// dir, borrowing objects from mirror (a bare repository path) and seeding
// its index from seedIndex (a trusted index of the same files, or "").
func InitHostGit(ctx context.Context, dir, mirror, seedIndex string) error {
	// The skeleton `git init --bare --template=` would make, written
	// directly: a git process costs more than the rest of a create.
	hg := HostGitDir(dir)
	for _, d := range []string{"objects/info", "objects/pack", "refs/heads", "refs/tags", "info"} {
		if err := os.MkdirAll(filepath.Join(hg, d), 0o700); err != nil {
			return err
		}
	}
	skeleton := map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
	}
	for name, content := range skeleton {
		if err := os.WriteFile(filepath.Join(hg, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	alt := filepath.Join(mirror, "objects") + "\n"
	if err := os.WriteFile(filepath.Join(hg, "objects", "info", "alternates"), []byte(alt), 0o600); err != nil {
		return err
	}
	// Temp files of writes cut short by a crash are never part of a result.
	if err := os.MkdirAll(filepath.Join(hg, "info"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hg, "info", "exclude"), []byte(TempPattern+"\n"), 0o600); err != nil {
		return err
	}
	if seedIndex != "" {
		return copyFile(seedIndex, filepath.Join(hg, "index"))
	}
	return nil
}

// ForkHostGit gives the workspace at dir a host-private git directory that
// starts from the parent's index, exclude list and objects. All of them
// are hard-linked, not copied: loose objects are immutable, and the index
// and exclude list are only ever replaced by a rename (git's index.lock,
// Exclude's temporary file), never written in place, so a change on
// either side leaves the other's file as it was.
func ForkHostGit(ctx context.Context, parentDir, dir, mirror string) error {
	if err := InitHostGit(ctx, dir, mirror, ""); err != nil {
		return err
	}
	phg, hg := HostGitDir(parentDir), HostGitDir(dir)
	if err := os.Link(filepath.Join(phg, "index"), filepath.Join(hg, "index")); err != nil {
		return err
	}
	// What the parent keeps out of its results (Exclude), the fork does too.
	parentExclude := filepath.Join(phg, "info", "exclude")
	if _, err := os.Stat(parentExclude); err == nil {
		exclude := filepath.Join(hg, "info", "exclude")
		if err := os.Remove(exclude); err != nil {
			return err
		}
		if err := os.Link(parentExclude, exclude); err != nil {
			return err
		}
	}
	src := filepath.Join(HostGitDir(parentDir), "objects")
	dst := filepath.Join(HostGitDir(dir), "objects")
	fans, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, fan := range fans {
		if len(fan.Name()) != 2 || !fan.IsDir() {
			continue // info/, pack/
		}
		objs, err := os.ReadDir(filepath.Join(src, fan.Name()))
		if err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(dst, fan.Name()), 0o700); err != nil {
			return err
		}
		for _, o := range objs {
			if err := os.Link(filepath.Join(src, fan.Name(), o.Name()), filepath.Join(dst, fan.Name(), o.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Git runs host-side git for the workspace at dir whose files are at files.
type Git struct {
	Dir, Files string
	// Timeout bounds each operation (hostile trees can be slow); 0 = 2 min.
	Timeout time.Duration
	// MaxDiffBytes caps a diff; 0 = 64 MiB.
	MaxDiffBytes int64
	// unconfined runs git without its jail. Only the benchmark that
	// measures what the jail costs sets it.
	unconfined bool
}

func (g Git) run(ctx context.Context, max int64, stdin io.Reader, args ...string) ([]byte, error) {
	hg := HostGitDir(g.Dir)
	timeout := g.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	jail, err := g.jail()
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	out, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, MaxOutput: max, Stdin: stdin, Jail: jail,
		Args: append([]string{"-c", "core.bare=false", "-c", "core.quotePath=false", "-c", "core.autocrlf=false", "-c", "core.symlinks=true"}, args...),
		Env:  []string{"GIT_DIR=" + hg, "GIT_WORK_TREE=" + g.Files, "GIT_INDEX_FILE=" + filepath.Join(hg, "index")}})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("workspace %s: git took longer than %s: %w", filepath.Base(g.Dir), timeout, errdefs.ErrUnavailable)
	}
	if errors.Is(err, gitx.ErrOutputTooLarge) {
		return nil, fmt.Errorf("workspace %s: %v: %w", filepath.Base(g.Dir), err, errdefs.ErrTooLarge)
	}
	return out, err
}

// jail is what a host-side git over this workspace may see: the files
// (read-only), the host-private git directory, and the object stores that
// directory borrows from (its alternates, which only the host writes).
// Nothing else of the host is there, so no path the sandbox plants or
// swaps in its tree can lead git anywhere else (SECURITY.md H43).
func (g Git) jail() (*gitx.Jail, error) {
	if g.unconfined {
		return nil, nil
	}
	hg := HostGitDir(g.Dir)
	j := &gitx.Jail{ReadOnly: []string{g.Files}, Writable: []string{hg}}
	alt, err := os.ReadFile(filepath.Join(hg, "objects", "info", "alternates"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the git directory's alternates: %w", err)
	}
	for _, line := range strings.Split(string(alt), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			j.ReadOnly = append(j.ReadOnly, line)
		}
	}
	return j, nil
}

func (g Git) timeout() time.Duration {
	if g.Timeout == 0 {
		return 2 * time.Minute
	}
	return g.Timeout
}

// stage records the current files in the host index. The caller holds the
// workspace's lock, so an index.lock left behind is stale (a crash).
func (g Git) stage(ctx context.Context) error {
	if err := g.refuseFIFOs(ctx); err != nil {
		return err
	}
	os.Remove(filepath.Join(HostGitDir(g.Dir), "index.lock"))
	_, err := g.run(ctx, 0, nil, "add", "--all", "--", ".")
	return err
}

// gitOpens are the names git opens in a work tree while staging and
// diffing it: per-directory ignore and attribute files, the submodule list.
var gitOpens = map[string]bool{".gitignore": true, ".gitattributes": true, ".gitmodules": true}

// refuseFIFOs fails with ErrConflict when the files hold a FIFO that git
// would open: one named in gitOpens, or one inside a nested git directory
// (git reads a nested repository's HEAD and refs to record it as a gitlink;
// the top .git only through its modules/). git opens files blocking, so
// such a FIFO would stall every status, diff and commit until the timeout.
// A FIFO anywhere else is skipped by git and allowed here. The walk follows
// no link and opens directories non-blocking; a FIFO planted after it still
// costs no more than the timeout. For an overlay workspace only the upper
// layer is walked: the pristine checkout below holds no FIFO, so the cost
// follows the workspace's own changes, not the repo.
func (g Git) refuseFIFOs(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout())
	defer cancel()
	tree := g.Files
	if g.Files == (overlayDriver{}).Files(g.Dir) {
		tree = filepath.Join(g.Dir, "upper")
	}
	root, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer root.Close()
	var walk func(rel string, inGitDir bool) error
	walk = func(rel string, inGitDir bool) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("workspace %s: checking the files: %w", filepath.Base(g.Dir), errdefs.ErrUnavailable)
		}
		d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil // gone or replaced since it was listed: git will see the same
		}
		var subdirs []string
		for {
			es, err := d.ReadDir(1024)
			for _, e := range es {
				p := path.Join(rel, e.Name())
				switch {
				case e.Type()&fs.ModeNamedPipe != 0 && (inGitDir || gitOpens[e.Name()]):
					d.Close()
					return fmt.Errorf("workspace %s: %s is a FIFO, which git would block on: remove it: %w", filepath.Base(g.Dir), p, errdefs.ErrConflict)
				case e.IsDir():
					subdirs = append(subdirs, e.Name())
				}
			}
			if err != nil {
				break
			}
		}
		d.Close()
		for _, name := range subdirs {
			p := path.Join(rel, name)
			switch {
			case rel == "." && name == ".git":
				if err := walk(".git/modules", true); err != nil {
					return err
				}
			case name == ".git":
				if err := walk(p, true); err != nil {
					return err
				}
			default:
				if err := walk(p, inGitDir); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(".", false)
}

// Change is one changed path relative to the base commit.
type Change = apitypes.Change

// Changes lists the paths that differ from base.
func (g Git) Changes(ctx context.Context, base string) ([]Change, error) {
	if err := g.stage(ctx); err != nil {
		return nil, err
	}
	return g.changes(ctx, "--cached", base)
}

// TreeChanges lists the paths that differ between commit base and tree,
// a tree already written to hostgit (see Vet).
func (g Git) TreeChanges(ctx context.Context, base, tree string) ([]Change, error) {
	return g.changes(ctx, base, tree)
}

// changes runs git diff --name-status over the revisions revs.
func (g Git) changes(ctx context.Context, revs ...string) ([]Change, error) {
	args := append([]string{"diff", "--no-renames", "--name-status", "-z", "--no-ext-diff"}, revs...)
	out, err := g.run(ctx, 0, nil, append(args, "--")...)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	changes := []Change{}
	for i := 0; i+1 < len(parts); i += 2 {
		changes = append(changes, Change{Status: parts[i], Path: parts[i+1]})
	}
	return changes, nil
}

// Diff is the unified diff (with binary patches) from base to the files,
// new and deleted files included.
func (g Git) Diff(ctx context.Context, base string, paths ...string) ([]byte, error) {
	if err := g.stage(ctx); err != nil {
		return nil, err
	}
	return g.diff(ctx, []string{"--cached", base}, paths)
}

// TreeDiff is the unified diff (with binary patches) from commit base to
// tree, a tree already written to hostgit (see Vet).
func (g Git) TreeDiff(ctx context.Context, base, tree string) ([]byte, error) {
	return g.diff(ctx, []string{base, tree}, nil)
}

// diff runs git diff over the revisions revs, limited to paths.
func (g Git) diff(ctx context.Context, revs, paths []string) ([]byte, error) {
	max := g.MaxDiffBytes
	if max == 0 {
		max = 64 << 20
	}
	args := append([]string{"diff", "--binary", "--no-ext-diff", "--no-textconv", "--no-color"}, revs...)
	args = append(args, "--")
	for _, p := range paths {
		// Literal pathspecs: a caller's path is a path, never git magic
		// such as :(exclude) or a glob.
		args = append(args, ":(literal)"+p)
	}
	return g.run(ctx, max, nil, args...)
}

// Head reads the workspace's HEAD from its .git through os.Root: the branch
// (empty when detached) and the commit.
func Head(files string) (branch, commit string, err error) {
	root, err := os.OpenRoot(files)
	if err != nil {
		return "", "", err
	}
	defer root.Close()
	head, err := readSmall(root, ".git/HEAD")
	if err != nil {
		return "", "", fmt.Errorf("reading HEAD: %w", err)
	}
	head = strings.TrimSpace(head)
	if shaRE.MatchString(head) {
		return "", head, nil
	}
	ref, ok := strings.CutPrefix(head, "ref: ")
	if !ok || !strings.HasPrefix(ref, "refs/heads/") || strings.Contains(ref, "..") {
		return "", "", fmt.Errorf("unexpected HEAD %q", head)
	}
	branch = strings.TrimPrefix(ref, "refs/heads/")
	if s, err := readSmall(root, ".git/"+ref); err == nil && shaRE.MatchString(strings.TrimSpace(s)) {
		return branch, strings.TrimSpace(s), nil
	}
	packed, err := readSmall(root, ".git/packed-refs")
	if err == nil {
		sc := bufio.NewScanner(strings.NewReader(packed))
		for sc.Scan() {
			if sha, name, ok := strings.Cut(sc.Text(), " "); ok && name == ref && shaRE.MatchString(sha) {
				return branch, sha, nil
			}
		}
	}
	return branch, "", nil // unborn branch
}

// readSmall reads a regular file of at most 1 MiB inside root.
func readSmall(root *os.Root, name string) (string, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Size() > 1<<20 {
		return "", fmt.Errorf("%s is not a small regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b), err
}

// SetBranch points the workspace at a new branch at commit, through the
// file API (atomic, durable, owned by uid:gid, never following links out).
func SetBranch(ctx context.Context, files, branch, commit string, uid, gid int) error {
	fsys, err := fileapi.Open(files, fileapi.Options{UID: uid, GID: gid})
	if err != nil {
		return err
	}
	defer fsys.Close()
	if _, err := fsys.Write(ctx, ".git/refs/heads/"+branch, strings.NewReader(commit+"\n"), 0o644, true); err != nil {
		return fmt.Errorf("writing branch %s: %w", branch, err)
	}
	if _, err := fsys.Write(ctx, ".git/HEAD", strings.NewReader("ref: refs/heads/"+branch+"\n"), 0o644, false); err != nil {
		return fmt.Errorf("writing HEAD: %w", err)
	}
	return nil
}

// ValidBranch checks a branch name with git's own rules.
func ValidBranch(ctx context.Context, name string) error {
	if name == "" || strings.HasPrefix(name, "-") || len(name) > 200 {
		return errdefs.Invalid("branch name %q is not valid", name)
	}
	if _, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: []string{"check-ref-format", "--branch", name}}); err != nil {
		return errdefs.Invalid("branch name %q is not valid", name)
	}
	if strings.HasPrefix(name, "refs/") || name == "HEAD" {
		return errdefs.Invalid("branch name %q is not valid", name)
	}
	return nil
}

// Author is a commit identity.
type Author = apitypes.Author

// Vet judges the tree a commit would record, before the commit exists:
// an error refuses the commit. Judging the written tree, not the files,
// means what is judged is exactly what is committed, however the files
// change meanwhile.
type Vet func(ctx context.Context, tree string) error

// Commit records every change in the files as one commit on the
// workspace's branch (like git add -A && git commit) and returns its name.
// vet, if set, may refuse the tree first.
// The commit is built in hostgit and copied into the workspace's .git.
func (g Git) Commit(ctx context.Context, msg string, author Author, uid, gid int, vet Vet) (string, error) {
	if strings.TrimSpace(msg) == "" {
		return "", errdefs.Invalid("commit message is empty")
	}
	if strings.ContainsAny(author.Name+author.Email, "<>\n\x00") || author.Name == "" || author.Email == "" {
		return "", errdefs.Invalid("commit author %q <%s> is not valid", author.Name, author.Email)
	}
	branch, parent, err := Head(g.Files)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	if err := g.stage(ctx); err != nil {
		return "", err
	}
	out, err := g.run(ctx, 0, nil, "write-tree")
	if err != nil {
		return "", err
	}
	tree := strings.TrimSpace(string(out))
	if parent != "" {
		if pt, err := g.run(ctx, 0, nil, "rev-parse", "--verify", "--quiet", parent+"^{tree}"); err == nil && strings.TrimSpace(string(pt)) == tree {
			return "", fmt.Errorf("workspace %s: nothing to commit: %w", filepath.Base(g.Dir), errdefs.ErrConflict)
		}
	}
	if vet != nil {
		if err := vet(ctx, tree); err != nil {
			return "", err
		}
	}
	commit, err := g.commitObject(ctx, tree, parent, author, msg)
	if err != nil {
		return "", err
	}
	if err := g.exportObjects(ctx, uid, gid); err != nil {
		return "", fmt.Errorf("workspace %s: copying objects: %w", filepath.Base(g.Dir), err)
	}
	fsys, err := fileapi.Open(g.Files, fileapi.Options{UID: uid, GID: gid})
	if err != nil {
		return "", err
	}
	defer fsys.Close()
	// The workspace's index now matches the commit: copy the host's.
	idx, err := os.Open(filepath.Join(HostGitDir(g.Dir), "index"))
	if err != nil {
		return "", err
	}
	defer idx.Close()
	if _, err := fsys.Write(ctx, ".git/index", idx, 0o644, false); err != nil {
		return "", err
	}
	target := ".git/HEAD"
	content := commit + "\n"
	if branch != "" {
		target = ".git/refs/heads/" + branch
	}
	if _, err := fsys.Write(ctx, target, strings.NewReader(content), 0o644, true); err != nil {
		return "", err
	}
	return commit, nil
}

// commitObject writes a commit of tree on parent ("" for none) to
// hostgit, touching no ref, and returns its name.
func (g Git) commitObject(ctx context.Context, tree, parent string, author Author, msg string) (string, error) {
	now := time.Now()
	stamp := fmt.Sprintf("%d %s", now.Unix(), now.Format("-0700"))
	var obj bytes.Buffer
	fmt.Fprintf(&obj, "tree %s\n", tree)
	if parent != "" {
		fmt.Fprintf(&obj, "parent %s\n", parent)
	}
	fmt.Fprintf(&obj, "author %s <%s> %s\ncommitter %s <%s> %s\n\n%s", author.Name, author.Email, stamp, author.Name, author.Email, stamp, msg)
	if !strings.HasSuffix(msg, "\n") {
		obj.WriteByte('\n')
	}
	out, err := g.run(ctx, 0, &obj, "hash-object", "-t", "commit", "-w", "--stdin")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// exportObjects copies hostgit's loose objects into the workspace's
// .git/objects through os.Root, skipping those already present.
func (g Git) exportObjects(ctx context.Context, uid, gid int) error {
	src := filepath.Join(HostGitDir(g.Dir), "objects")
	root, err := os.OpenRoot(g.Files)
	if err != nil {
		return err
	}
	defer root.Close()
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || ctx.Err() != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		fan := filepath.Dir(rel)
		if len(fan) != 2 || len(d.Name()) < 38 {
			return nil // info/, pack/
		}
		name := filepath.Join(".git", "objects", rel)
		if _, err := root.Lstat(name); err == nil {
			return nil
		}
		dirName := filepath.Join(".git", "objects", fan)
		if err := root.Mkdir(dirName, 0o755); err == nil && uid >= 0 {
			root.Lchown(dirName, uid, gid)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tmp := name + ".agentbox-tmp"
		f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o444)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err == nil {
			err = f.Sync()
		}
		if uid >= 0 {
			f.Chown(uid, gid)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = root.Rename(tmp, name)
		}
		if err != nil {
			root.Remove(tmp)
		}
		return err
	})
}

// Exclude keeps paths matching pattern (a gitignore pattern, rooted at the
// workspace's top with a leading slash) out of every status, diff and
// commit of the workspace, through the host-side git dir's info/exclude,
// which nothing in the sandbox can reach. A pattern already there is not
// added twice.
func (g Git) Exclude(pattern string) error {
	if pattern == "" || strings.ContainsAny(pattern, "\n\r") {
		return errdefs.Invalid("exclude pattern %q", pattern)
	}
	excludeMu.Lock()
	defer excludeMu.Unlock()
	dir := filepath.Join(HostGitDir(g.Dir), "info")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	f := filepath.Join(dir, "exclude")
	old, err := os.ReadFile(f)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	for _, l := range strings.Split(string(old), "\n") {
		if l == pattern {
			return nil
		}
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	tmp, err := os.CreateTemp(dir, "exclude.*")
	if err == nil {
		_, err = tmp.Write(append(old, pattern+"\n"...))
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), f)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		return fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	return nil
}

// excludeMu serialises Exclude's read-modify-write of info/exclude: two
// admissions into one workspace may run at once.
var excludeMu sync.Mutex
