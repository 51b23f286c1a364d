// Package repocache keeps one bare mirror per git remote and the shared,
// read-only pristine checkouts that overlay workspaces stack on.
//
// A remote is cloned once: concurrent requests for one URL in this daemon
// share a single clone (single-flight) and a file lock per URL keeps a
// second daemon on the same data directory from racing it. Credentials in a
// URL are used for the clone and then dropped: the database, the mirror's
// config, logs and errors only ever see the clean URL.
package repocache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/gitx"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// Options configures a Cache.
type Options struct {
	// ReposDir holds the mirrors; PristineDir the checkouts; LockDir the
	// lock files. All are created if missing.
	ReposDir, PristineDir, LockDir string
	// UID and GID own the files of a checkout (the sandbox user), when >= 0.
	UID, GID int
	// CloneTimeout bounds one clone or fetch; 0 means 30 minutes.
	CloneTimeout time.Duration
	// Logger receives one line per clone, fetch and checkout.
	Logger *slog.Logger
}

// Cache is the repo cache.
type Cache struct {
	opts  Options
	st    store.Store
	log   *slog.Logger
	clone singleflight.Group
	check singleflight.Group
	// resolved caches ref -> commit per mirror state. The key holds the
	// repo's LastFetchAt, which every fetch (by any daemon sharing the
	// database) advances, so an entry can never outlive the refs it read.
	resolved sync.Map
}

// New returns a cache over st.
func New(st store.Store, opts Options) (*Cache, error) {
	for _, d := range []string{opts.ReposDir, opts.PristineDir, opts.LockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	// Pristine checkouts must be traversable by the sandbox user.
	if err := os.Chmod(opts.PristineDir, 0o711); err != nil {
		return nil, err
	}
	if opts.CloneTimeout == 0 {
		opts.CloneTimeout = 30 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cache{opts: opts, st: st, log: opts.Logger}, nil
}

// Lookup finds a cached repo by ID or by URL (credentials ignored).
func (c *Cache) Lookup(ctx context.Context, idOrURL string) (store.Repo, error) {
	if ids.HasPrefix(idOrURL, "repo") {
		return c.st.GetRepo(ctx, idOrURL)
	}
	rem, err := ParseRemote(idOrURL)
	if err != nil {
		// Not a URL that could have been cloned: no repo has it.
		return store.Repo{}, fmt.Errorf("repo %q %w (neither a repo ID nor the URL of a cached repo)", idOrURL, errdefs.ErrNotFound)
	}
	return c.st.GetRepoByURL(ctx, rem.Clean)
}

// Add returns the cached repo for rawURL, cloning it first if needed. The
// bool is true when this call (or one it joined) made the clone.
// progress, if not nil, receives git's progress output.
func (c *Cache) Add(ctx context.Context, rawURL string, progress io.Writer) (store.Repo, bool, error) {
	rem, err := ParseRemote(rawURL)
	if err != nil {
		return store.Repo{}, false, err
	}
	if r, err := c.st.GetRepoByURL(ctx, rem.Clean); err == nil {
		return r, false, nil
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return store.Repo{}, false, err
	}
	pw := &progressFan{}
	pw.add(progress)
	ch := c.clone.DoChan(rem.Clean, func() (any, error) {
		// Detached from the first caller: others may be waiting on it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CloneTimeout)
		defer cancel()
		return c.doClone(cctx, rem, pw)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return store.Repo{}, false, res.Err
		}
		r := res.Val.(cloneResult)
		return r.repo, r.cloned, nil
	case <-ctx.Done():
		return store.Repo{}, false, ctx.Err()
	}
}

type cloneResult struct {
	repo   store.Repo
	cloned bool
}

func (c *Cache) lockPath(kind, key string) string {
	h := sha256.Sum256([]byte(key))
	return filepath.Join(c.opts.LockDir, kind+"-"+hex.EncodeToString(h[:8])+".lock")
}

func (c *Cache) doClone(ctx context.Context, rem Remote, progress io.Writer) (cloneResult, error) {
	lk, err := flock.Acquire(ctx, c.lockPath("repo", rem.Clean))
	if err != nil {
		return cloneResult{}, err
	}
	defer lk.Unlock()
	// Another daemon may have finished the clone while we waited.
	if r, err := c.st.GetRepoByURL(ctx, rem.Clean); err == nil {
		return cloneResult{repo: r}, nil
	}

	id := ids.New("repo")
	final := filepath.Join(c.opts.ReposDir, id+".git")
	tmp := filepath.Join(c.opts.ReposDir, ".tmp-"+id)
	defer os.RemoveAll(tmp)
	start := time.Now()
	c.log.InfoContext(ctx, "cloning repo", "repo_id", id, "url", rem.Clean)

	args := []string{"clone", "--bare", "--template=", "--no-tags"}
	if progress != nil {
		args = append(args, "--progress")
	}
	args = append(args, "--", rem.Clean, tmp)
	if _, err := gitx.Run(ctx, gitx.Cmd{Args: credArgs(rem, args), Env: credEnv(rem), Stderr: progress, Redact: []string{rem.Password, rem.User}}); err != nil {
		return cloneResult{}, fmt.Errorf("cloning %s: %w", rem.Clean, errdefs.Invalid("%v", err))
	}
	// Fetch tags as well, into the same refs a later fetch maintains.
	if err := c.fetchInto(ctx, tmp, rem, progress); err != nil {
		return cloneResult{}, fmt.Errorf("cloning %s: %w", rem.Clean, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return cloneResult{}, fmt.Errorf("cloning %s: %w", rem.Clean, err)
	}
	now := time.Now().UTC()
	r := store.Repo{ID: id, URL: rem.Clean, Path: final, DefaultBranch: defaultBranch(ctx, final),
		SizeBytes: DiskUsage(final), CreatedAt: now, LastFetchAt: now, LastUsedAt: now}
	if err := c.st.CreateRepo(ctx, r); err != nil {
		os.RemoveAll(final)
		// Another node sharing the store cloned it meanwhile: use its.
		if errors.Is(err, errdefs.ErrConflict) {
			if other, gerr := c.st.GetRepoByURL(ctx, rem.Clean); gerr == nil {
				return cloneResult{repo: other}, nil
			}
		}
		return cloneResult{}, fmt.Errorf("recording repo %s: %w", rem.Clean, err)
	}
	c.event(ctx, "repo.cloned", id, map[string]any{"url": rem.Clean, "bytes": r.SizeBytes, "ms": time.Since(start).Milliseconds()})
	c.log.InfoContext(ctx, "cloned repo", "repo_id", id, "url", rem.Clean, "bytes", r.SizeBytes, "duration", time.Since(start))
	return cloneResult{repo: r, cloned: true}, nil
}

// credArgs prepends a credential helper that answers from the environment,
// so that the secret never appears in argv or on disk.
func credArgs(rem Remote, args []string) []string {
	if rem.User == "" && rem.Password == "" {
		return args
	}
	helper := `!f() { test "$1" = get && printf 'username=%s\npassword=%s\n' "$AGENTBOX_GIT_USER" "$AGENTBOX_GIT_PASSWORD"; }; f`
	return append([]string{"-c", "credential.helper=", "-c", "credential.helper=" + helper}, args...)
}

func credEnv(rem Remote) []string {
	if rem.User == "" && rem.Password == "" {
		return nil
	}
	return []string{"AGENTBOX_GIT_USER=" + rem.User, "AGENTBOX_GIT_PASSWORD=" + rem.Password}
}

func (c *Cache) fetchInto(ctx context.Context, dir string, rem Remote, progress io.Writer) error {
	args := []string{"fetch", "--prune", "--prune-tags", "--force"}
	if progress != nil {
		args = append(args, "--progress")
	}
	args = append(args, "--", rem.Clean, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
	_, err := gitx.Run(ctx, gitx.Cmd{Dir: dir, Args: credArgs(rem, args), Env: credEnv(rem), Stderr: progress, Redact: []string{rem.Password, rem.User}})
	if err != nil {
		return errdefs.Invalid("fetching %s: %v", rem.Clean, err)
	}
	return nil
}

// Fetch brings the mirror of repo id up to date. rawURL, if set, must be the
// repo's URL and may carry credentials for this one fetch.
func (c *Cache) Fetch(ctx context.Context, id, rawURL string, progress io.Writer) (store.Repo, error) {
	r, err := c.st.GetRepo(ctx, id)
	if err != nil {
		return r, err
	}
	if IsLocal(r.URL) {
		return r, errdefs.Invalid("repo %s (%s) was made by agentbox from a scratch or uploaded workspace: it has no remote to fetch from", id, r.URL)
	}
	rem := Remote{Clean: r.URL}
	if rawURL != "" {
		given, err := ParseRemote(rawURL)
		if err != nil {
			return r, err
		}
		if given.Clean != r.URL {
			return r, errdefs.Invalid("fetching repo %s: URL %s is not the repo's URL %s", id, given.Clean, r.URL)
		}
		rem = given
	}
	lk, err := flock.Acquire(ctx, c.lockPath("repo", r.URL))
	if err != nil {
		return r, err
	}
	defer lk.Unlock()
	fctx, cancel := context.WithTimeout(ctx, c.opts.CloneTimeout)
	defer cancel()
	start := time.Now()
	if err := c.fetchInto(fctx, r.Path, rem, progress); err != nil {
		return r, fmt.Errorf("repo %s: %w", id, err)
	}
	r.LastFetchAt = time.Now().UTC()
	// A fetch is a use: the collector removes the least recently used.
	r.LastUsedAt = r.LastFetchAt
	r.SizeBytes = DiskUsage(r.Path)
	if b := defaultBranch(ctx, r.Path); b != "" {
		r.DefaultBranch = b
	}
	if err := c.st.UpdateRepo(ctx, r); err != nil {
		return r, err
	}
	c.event(ctx, "repo.fetched", id, map[string]any{"bytes": r.SizeBytes, "ms": time.Since(start).Milliseconds()})
	return r, nil
}

func defaultBranch(ctx context.Context, mirror string) string {
	out, err := gitx.Run(ctx, gitx.Cmd{Dir: mirror, Hardened: true, Args: []string{"symbolic-ref", "--quiet", "--short", "HEAD"}})
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ValidRef checks the syntax of a ref given by a caller.
func ValidRef(ref string) error {
	switch {
	case ref == "":
		return errdefs.Invalid("ref is empty")
	case len(ref) > 255:
		return errdefs.Invalid("ref %.40q... is longer than 255 bytes", ref)
	case strings.HasPrefix(ref, "-"):
		return errdefs.Invalid("ref %q starts with '-'", ref)
	case strings.ContainsAny(ref, " \t\n\r\x00~^:?*[\\") || strings.Contains(ref, ".."):
		return errdefs.Invalid("ref %q contains characters git does not allow", ref)
	}
	return nil
}

// Resolve turns ref (branch, tag, full or abbreviated commit; empty means
// the default branch) into a full commit name. An unknown ref triggers one
// fetch before it is reported as not found.
func (c *Cache) Resolve(ctx context.Context, r store.Repo, ref string) (string, error) {
	if ref == "" {
		ref = "HEAD"
	}
	if err := ValidRef(ref); err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s\x00%d\x00%s", r.ID, r.LastFetchAt.UnixNano(), ref)
	if sha, ok := c.resolved.Load(key); ok {
		return sha.(string), nil
	}
	resolve := func() (string, error) {
		out, err := gitx.Run(ctx, gitx.Cmd{Dir: r.Path, Hardened: true,
			Args: []string{"rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}"}})
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(out)), nil
	}
	sha, err := resolve()
	if err == nil {
		c.resolved.Store(key, sha)
		return sha, nil
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	if _, ferr := c.Fetch(ctx, r.ID, "", nil); ferr == nil {
		if sha, err := resolve(); err == nil {
			return sha, nil
		}
	}
	return "", fmt.Errorf("ref %q not found in repo %s (%s): %w", ref, r.ID, r.URL, errdefs.ErrNotFound)
}

// Pristine returns the shared read-only checkout of commit, making it if
// needed. Checkouts are full standalone repositories (objects hard-linked
// from the mirror, no alternates file, origin pointing at the remote URL),
// so git works in any workspace stacked on them wherever it is mounted.
func (c *Cache) Pristine(ctx context.Context, r store.Repo, commit string) (store.Pristine, error) {
	if p, err := c.st.FindPristine(ctx, r.ID, commit); err == nil {
		if _, serr := os.Stat(p.Path); serr == nil {
			return p, nil
		}
		// Row without directory: forget it and rebuild below if unused.
		if p.RefCount == 0 {
			c.st.DeletePristine(ctx, p.ID)
		} else {
			return p, fmt.Errorf("pristine checkout %s (%s@%.12s) is missing on disk: %w", p.ID, r.ID, commit, errdefs.ErrUnavailable)
		}
	}
	ch := c.check.DoChan(r.ID+"@"+commit, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CloneTimeout)
		defer cancel()
		return c.makePristine(cctx, r, commit)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return store.Pristine{}, res.Err
		}
		return res.Val.(store.Pristine), nil
	case <-ctx.Done():
		return store.Pristine{}, ctx.Err()
	}
}

func (c *Cache) makePristine(ctx context.Context, r store.Repo, commit string) (store.Pristine, error) {
	lk, err := flock.Acquire(ctx, c.lockPath("pristine", r.ID+"@"+commit))
	if err != nil {
		return store.Pristine{}, err
	}
	defer lk.Unlock()
	if p, err := c.st.FindPristine(ctx, r.ID, commit); err == nil {
		return p, nil
	}
	id := ids.New("pc")
	final := filepath.Join(c.opts.PristineDir, id)
	tmp := filepath.Join(c.opts.PristineDir, ".tmp-"+id)
	defer os.RemoveAll(tmp)
	start := time.Now()
	if err := CheckoutRepo(ctx, r, commit, tmp, c.opts.UID, c.opts.GID); err != nil {
		return store.Pristine{}, fmt.Errorf("pristine checkout of %s@%.12s: %w", r.ID, commit, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return store.Pristine{}, err
	}
	now := time.Now().UTC()
	p := store.Pristine{ID: id, RepoID: r.ID, Commit: commit, Path: final, SizeBytes: DiskUsage(final), CreatedAt: now, LastUsedAt: now}
	if err := c.st.CreatePristine(ctx, p); err != nil {
		os.RemoveAll(final)
		// Another node sharing the store made the same checkout
		// meanwhile (the file lock is this node's alone): use it.
		if errors.Is(err, errdefs.ErrConflict) {
			if other, ferr := c.st.FindPristine(ctx, r.ID, commit); ferr == nil {
				return other, nil
			}
		}
		return store.Pristine{}, err
	}
	c.event(ctx, "pristine.created", r.ID, map[string]any{"pristine_id": id, "commit": commit, "ms": time.Since(start).Milliseconds()})
	return p, nil
}

// CheckoutRepo makes dir a standalone clone of r's mirror with commit
// checked out (detached), origin set to the remote URL, files owned by
// uid:gid (when >= 0) except the immutable object files.
func CheckoutRepo(ctx context.Context, r store.Repo, commit, dir string, uid, gid int) error {
	// Objects are hard links to the mirror's, unless dir is on another
	// file system (a workspace with a disk quota has its own), where
	// git's --local would fail rather than copy.
	local := "--local"
	if !sameDevice(r.Path, filepath.Dir(dir)) {
		local = "--no-hardlinks"
	}
	origin := []string{"-C", dir, "config", "remote.origin.url", r.URL}
	if IsLocal(r.URL) {
		// No remote: the clone's origin would name the mirror's host path.
		origin = []string{"-C", dir, "remote", "remove", "origin"}
	}
	steps := [][]string{
		{"clone", local, "--no-checkout", "--template=", "--quiet", "--", r.Path, dir},
		origin,
		{"-C", dir, "checkout", "--quiet", "--detach", commit},
	}
	for _, args := range steps {
		if _, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: append([]string{"-c", "protocol.file.allow=always"}, args...)}); err != nil {
			return err
		}
	}
	// A fresh clone's reflogs record "clone: from DATA/repos/..." with the
	// daemon's user and host name: nothing of the host belongs in a
	// checkout that sandboxes see.
	if err := os.RemoveAll(filepath.Join(dir, ".git", "logs")); err != nil {
		return fmt.Errorf("removing the clone's reflogs: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if uid < 0 {
		return nil
	}
	if err := ChownTree(dir, uid, gid); err != nil {
		return err
	}
	// chown changed every file's ctime: refresh the index so that git in the
	// workspace (and the host's own index, seeded from this one) does not
	// rehash the whole tree on its first status.
	if _, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: []string{"-C", dir, "update-index", "-q", "--refresh"}}); err != nil {
		return err
	}
	return os.Lchown(filepath.Join(dir, ".git", "index"), uid, gid)
}

// sameDevice reports whether a and b are on one file system (false when
// either cannot be read).
func sameDevice(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false
	}
	da, oka := sa.Sys().(*syscall.Stat_t)
	db, okb := sb.Sys().(*syscall.Stat_t)
	return oka && okb && da.Dev == db.Dev
}

// ChownTree gives every directory and every file except git's immutable
// object files (hard links shared with the mirror) to uid:gid.
func ChownTree(dir string, uid, gid int) error {
	objects := filepath.Join(dir, ".git", "objects") + string(filepath.Separator)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasPrefix(p, objects) {
			return nil
		}
		return os.Lchown(p, uid, gid)
	})
}

// Remove deletes a repo's mirror and pristine checkouts. It fails with
// ErrConflict while workspaces use the repo.
func (c *Cache) Remove(ctx context.Context, id string) error {
	r, err := c.st.GetRepo(ctx, id)
	if err != nil {
		return err
	}
	lk, err := flock.Acquire(ctx, c.lockPath("repo", r.URL))
	if err != nil {
		return err
	}
	defer lk.Unlock()
	pcs, err := c.st.ListPristines(ctx, id)
	if err != nil {
		return err
	}
	if err := c.st.DeleteRepo(ctx, id); err != nil {
		return err
	}
	// The rows are gone; the directories follow. A crash here leaves
	// directories the reconciler removes as unknown.
	for _, p := range pcs {
		os.RemoveAll(p.Path)
	}
	os.RemoveAll(r.Path)
	c.event(ctx, "repo.removed", id, map[string]any{"url": r.URL})
	return nil
}

func (c *Cache) event(ctx context.Context, typ, repoID string, detail map[string]any) {
	b, _ := json.Marshal(detail)
	if _, err := c.st.AppendEvent(ctx, store.Event{Actor: "daemon", Type: typ, RepoID: repoID, Detail: string(b)}); err != nil {
		c.log.WarnContext(ctx, "recording event", "type", typ, "err", err)
	}
}

// DiskUsage is the apparent size of the regular files under dir.
func DiskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// progressFan forwards progress to a writer and never fails: a caller that
// went away must not break a clone others are waiting on.
type progressFan struct {
	mu sync.Mutex
	ws []io.Writer
}

func (p *progressFan) add(w io.Writer) {
	if w == nil {
		return
	}
	p.mu.Lock()
	p.ws = append(p.ws, w)
	p.mu.Unlock()
}

func (p *progressFan) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.ws {
		w.Write(b)
	}
	return len(b), nil
}
