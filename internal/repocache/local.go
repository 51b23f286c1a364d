package repocache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/archive"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
	"github.com/agentbox/agentbox/internal/gitx"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// Local repos are made by agentbox itself, not cloned: their mirror holds
// a base commit that exists nowhere else, so that scratch and uploaded
// workspaces are ordinary workspaces of a repo (pristine checkout, host
// git directory borrowing the mirror's objects, fork, gc, reconciler and
// recovery all as for a clone). Their URLs use a scheme ParseRemote
// refuses, so none can be added, fetched or cloned again.
const (
	// EmptyURL is the repo of empty workspaces: one commit of the empty
	// tree, shared by all of them.
	EmptyURL = "agentbox://empty"
	// UploadURLPrefix starts the URL of a repo made from an uploaded
	// directory, one per upload: agentbox://upload/repo_....
	UploadURLPrefix = "agentbox://upload/"
	localScheme     = "agentbox://"
	localBranch     = "main"
)

// IsLocal says url is that of a repo agentbox made (no remote).
func IsLocal(url string) bool { return strings.HasPrefix(url, localScheme) }

// IsUpload says url is that of a repo made from an upload.
func IsUpload(url string) bool { return strings.HasPrefix(url, UploadURLPrefix) }

// Identity signs the base commits of local repos.
type Identity struct{ Name, Email string }

// Empty returns the repo of empty workspaces, making it the first time:
// a mirror whose branch main holds one commit of the empty tree.
// Concurrent callers, in this daemon or another on the data dir, share one.
func (c *Cache) Empty(ctx context.Context, who Identity) (store.Repo, error) {
	if r, err := c.st.GetRepoByURL(ctx, EmptyURL); err == nil {
		return r, nil
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return store.Repo{}, err
	}
	ch := c.clone.DoChan(EmptyURL, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.CloneTimeout)
		defer cancel()
		lk, err := flock.Acquire(cctx, c.lockPath("repo", EmptyURL))
		if err != nil {
			return store.Repo{}, err
		}
		defer lk.Unlock()
		if r, err := c.st.GetRepoByURL(cctx, EmptyURL); err == nil {
			return r, nil
		}
		r, _, err := c.makeLocal(cctx, "", EmptyURL, "", "agentbox: an empty workspace", who)
		return r, err
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return store.Repo{}, res.Err
		}
		return res.Val.(store.Repo), nil
	case <-ctx.Done():
		return store.Repo{}, ctx.Err()
	}
}

// Import makes a repo whose one commit is the directory tree in archive
// (a tar stream; see package archive for what it refuses), and returns it
// with that commit. The files are unpacked into a host-only staging
// directory, committed with git confined to it and the new mirror, and
// removed. Ignore files in the tree do not apply: what was uploaded is the
// commit. Empty directories are not kept (git records files).
func (c *Cache) Import(ctx context.Context, r io.Reader, lim archive.Limits, who Identity) (store.Repo, string, error) {
	id := ids.New("repo")
	staging := filepath.Join(c.opts.ReposDir, ".tmp-"+id+"-files")
	if err := os.Mkdir(staging, 0o700); err != nil {
		return store.Repo{}, "", err
	}
	defer os.RemoveAll(staging)
	st, err := archive.Extract(ctx, r, staging, lim)
	if err != nil {
		return store.Repo{}, "", fmt.Errorf("uploaded directory: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, c.opts.CloneTimeout)
	defer cancel()
	repo, commit, err := c.makeLocal(cctx, id, UploadURLPrefix+id, staging, "agentbox: uploaded files", who)
	if err != nil {
		return repo, "", err
	}
	c.log.InfoContext(ctx, "imported an upload", "repo_id", repo.ID, "files", st.Files, "bytes", st.Bytes)
	return repo, commit, nil
}

// makeLocal makes the mirror of a local repo with one commit on main: of
// the files in tree, or of the empty tree when tree is "", and records
// it. id is the repo's ID ("": a new one).
func (c *Cache) makeLocal(ctx context.Context, id, url, tree, msg string, who Identity) (store.Repo, string, error) {
	if id == "" {
		id = ids.New("repo")
	}
	final := filepath.Join(c.opts.ReposDir, id+".git")
	tmp := filepath.Join(c.opts.ReposDir, ".tmp-"+id)
	defer os.RemoveAll(tmp)
	start := time.Now()
	git := func(stdin io.Reader, env []string, jail *gitx.Jail, args ...string) (string, error) {
		dir := ""
		if jail != nil {
			dir = tree
		}
		out, err := gitx.Run(ctx, gitx.Cmd{Dir: dir, Hardened: true, Stdin: stdin, Jail: jail, Args: args,
			Env: append([]string{"GIT_DIR=" + tmp}, env...)})
		return strings.TrimSpace(string(out)), err
	}
	if _, err := gitx.Run(ctx, gitx.Cmd{Hardened: true, Args: []string{"init", "--quiet", "--bare", "--template=", "--initial-branch=" + localBranch, "--", tmp}}); err != nil {
		return store.Repo{}, "", fmt.Errorf("making repo %s: %w", id, err)
	}
	var treeID string
	var err error
	if tree == "" {
		treeID, err = git(strings.NewReader(""), nil, nil, "mktree")
	} else {
		// The staging tree came from a client: git reads it confined to
		// it and the new repository, and with no ignore file applying.
		index := filepath.Join(tmp, "agentbox-index")
		env := []string{"GIT_WORK_TREE=" + tree, "GIT_INDEX_FILE=" + index}
		jail := &gitx.Jail{ReadOnly: []string{tree}, Writable: []string{tmp}}
		if _, err = git(nil, env, jail, "-c", "core.bare=false", "-c", "core.autocrlf=false", "-c", "core.symlinks=true",
			"add", "--all", "--force", "--", "."); err == nil {
			treeID, err = git(nil, env, jail, "write-tree")
		}
		os.Remove(index)
	}
	if err != nil {
		return store.Repo{}, "", fmt.Errorf("making repo %s: %w", id, err)
	}
	env := []string{"GIT_AUTHOR_NAME=" + who.Name, "GIT_AUTHOR_EMAIL=" + who.Email, "GIT_COMMITTER_NAME=" + who.Name, "GIT_COMMITTER_EMAIL=" + who.Email}
	commit, err := git(nil, env, nil, "commit-tree", treeID, "-m", msg)
	if err == nil {
		_, err = git(nil, nil, nil, "update-ref", "refs/heads/"+localBranch, commit)
	}
	if err != nil {
		return store.Repo{}, "", fmt.Errorf("making repo %s: %w", id, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return store.Repo{}, "", err
	}
	now := time.Now().UTC()
	r := store.Repo{ID: id, URL: url, Path: final, DefaultBranch: localBranch, SizeBytes: DiskUsage(final),
		CreatedAt: now, LastFetchAt: now, LastUsedAt: now}
	if err := c.st.CreateRepo(ctx, r); err != nil {
		os.RemoveAll(final)
		return store.Repo{}, "", fmt.Errorf("recording repo %s: %w", id, err)
	}
	c.event(ctx, "repo.created", id, map[string]any{"url": url, "commit": commit, "bytes": r.SizeBytes, "ms": time.Since(start).Milliseconds()})
	return r, commit, nil
}
