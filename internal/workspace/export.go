package workspace

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/gitx"
)

// Export is the history a workspace's result leaves as: the commits from
// Base to Tip, all of them objects of the host-private git directory.
type Export struct {
	// Base is the workspace's base commit.
	Base string
	// Head is the last commit on the branch that the host made (ws commit)
	// and that descends from Base; Base when there is none.
	Head string
	// Tip is Head, or, when the files differ from Head, a commit of the
	// files on top of it (Uncommitted).
	Tip         string
	Uncommitted bool
	// Foreign says the workspace's HEAD names a commit the host does not
	// have (made inside the sandbox with its own git): its change is in
	// the export, as part of Tip's, but not its commits.
	Foreign bool
	// Unborn says HEAD names a branch with no commit yet: the export's
	// commit is on the base, kept in hostgit, not a root commit.
	Unborn bool
	// Branch is the workspace's branch, checked with git's rules; empty
	// when HEAD is detached or its name is not a valid branch (a bundle
	// then names it agentbox/export, and says so here).
	Branch string
}

// export works out what leaves, from hostgit alone: the host never reads
// the sandbox's object store, only its HEAD's name, which it trusts only
// as far as hostgit knows that commit and finds base below it. The caller
// holds the workspace's lock.
func (g Git) export(ctx context.Context, base string, author Author) (Export, error) {
	e := Export{Base: base, Head: base}
	branch, head, err := Head(g.Files)
	if err != nil {
		return e, fmt.Errorf("workspace %s: %w", filepath.Base(g.Dir), err)
	}
	if branch != "" && ValidBranch(ctx, branch) == nil {
		e.Branch = branch
	}
	e.Unborn = head == ""
	if head != "" && head != base {
		known, err := g.isAncestor(ctx, base, head)
		if err != nil {
			return e, err
		}
		if known {
			e.Head = head
		} else {
			e.Foreign = true
		}
	}
	if err := g.stage(ctx); err != nil {
		return e, err
	}
	out, err := g.run(ctx, 0, nil, "write-tree")
	if err != nil {
		return e, err
	}
	tree := strings.TrimSpace(string(out))
	out, err = g.run(ctx, 0, nil, "rev-parse", "--verify", "--end-of-options", e.Head+"^{tree}")
	if err != nil {
		return e, err
	}
	e.Tip = e.Head
	if strings.TrimSpace(string(out)) != tree {
		msg := "Uncommitted changes of workspace " + filepath.Base(g.Dir) + "\n"
		if e.Foreign {
			msg = "Changes of workspace " + filepath.Base(g.Dir) + "\n\nIncludes commits made inside the sandbox, as one change.\n"
		}
		if e.Tip, err = g.commitObject(ctx, tree, e.Head, author, msg); err != nil {
			return e, err
		}
		e.Uncommitted = true
	}
	return e, nil
}

// isAncestor says whether hostgit has commit head and finds base below it.
// head comes from the workspace's .git, checked to be an object name.
func (g Git) isAncestor(ctx context.Context, base, head string) (bool, error) {
	out, err := g.run(ctx, 0, strings.NewReader(head+"\n"), "cat-file", "--batch-check=%(objecttype)")
	if err != nil {
		return false, err
	}
	if strings.TrimSpace(string(out)) != "commit" {
		return false, nil
	}
	_, err = g.run(ctx, 0, nil, "merge-base", "--is-ancestor", "--end-of-options", base, head)
	if gitx.ExitCode(err) == 1 {
		return false, nil
	}
	return err == nil, err
}

// Patch is the workspace's result as one mbox of `git format-patch`
// messages, from base: the commits the host made on the branch, then the
// uncommitted change (or, when HEAD is a commit made inside the sandbox,
// the whole change since the last host commit) as one more message by
// author. Empty when nothing changed.
func (g Git) Patch(ctx context.Context, base string, author Author) ([]byte, Export, error) {
	e, err := g.export(ctx, base, author)
	if err != nil || e.Tip == base {
		return nil, e, err
	}
	max := g.MaxDiffBytes
	if max == 0 {
		max = 64 << 20
	}
	out, err := g.run(ctx, max, nil, "format-patch", "--stdout", "--binary", "--no-color", "--no-signature",
		"--no-textconv", "--no-ext-diff", "--end-of-options", base+".."+e.Tip)
	return out, e, err
}

// Bundle is a git bundle of the branch from base to the export's tip
// (base is its prerequisite: fetch it into a clone that has base), with
// the branch named as in the workspace (agentbox/export when it has none).
func (g Git) Bundle(ctx context.Context, base string, author Author) ([]byte, Export, error) {
	e, err := g.export(ctx, base, author)
	if err != nil {
		return nil, e, err
	}
	if e.Tip == base {
		return nil, e, fmt.Errorf("workspace %s: nothing to bundle: no change since the base commit: %w", filepath.Base(g.Dir), errdefs.ErrConflict)
	}
	if e.Branch == "" {
		e.Branch = "agentbox/export"
	}
	ref := "refs/heads/" + e.Branch
	// A ref of hostgit's own, named as the bundle names it, dropped after.
	if _, err := g.run(ctx, 0, nil, "update-ref", "--no-deref", ref, e.Tip); err != nil {
		return nil, e, err
	}
	defer g.run(context.WithoutCancel(ctx), 0, nil, "update-ref", "-d", ref)
	max := g.MaxDiffBytes
	if max == 0 {
		max = 64 << 20
	}
	out, err := g.run(ctx, max, nil, "bundle", "create", "--quiet", "-", ref, "^"+base)
	return out, e, err
}

// Candidate makes the commit a review judges: the files as they are now,
// committed on the branch when they differ from a HEAD the host made
// (vet judges the tree first, as for Commit), or, when HEAD was made
// inside the sandbox or its branch has no commit, the export's commit of
// the files on the last host commit (or the base), kept in hostgit alone
// (the branch the sandbox sees stays).
func (g Git) Candidate(ctx context.Context, base, msg string, author Author, uid, gid int, vet Vet) (Export, error) {
	e, err := g.export(ctx, base, author)
	if err != nil || !e.Uncommitted || e.Foreign || e.Unborn {
		return e, err
	}
	commit, err := g.Commit(ctx, msg, author, uid, gid, vet)
	if err != nil {
		return e, err
	}
	e.Head, e.Tip, e.Uncommitted = commit, commit, false
	return e, nil
}

// Stats counts the change from base to tip: files, inserted and deleted
// lines (binary files count as files only).
func (g Git) Stats(ctx context.Context, base, tip string) (files, insertions, deletions int, err error) {
	out, err := g.run(ctx, 0, nil, "diff", "--numstat", "--no-renames", "--no-ext-diff", "--no-textconv", "-z", "--end-of-options", base, tip, "--")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		f := strings.Fields(rec)
		if len(f) < 2 {
			continue
		}
		files++
		var a, d int
		if _, err := fmt.Sscanf(f[0]+" "+f[1], "%d %d", &a, &d); err == nil {
			insertions += a
			deletions += d
		}
	}
	return files, insertions, deletions, nil
}

// Tree is the tree of the files as they are now (staged into hostgit).
func (g Git) Tree(ctx context.Context) (string, error) {
	if err := g.stage(ctx); err != nil {
		return "", err
	}
	out, err := g.run(ctx, 0, nil, "write-tree")
	return strings.TrimSpace(string(out)), err
}

// CommitTree is the tree of a commit hostgit holds.
func (g Git) CommitTree(ctx context.Context, commit string) (string, error) {
	out, err := g.run(ctx, 0, nil, "rev-parse", "--verify", "--end-of-options", commit+"^{tree}")
	return strings.TrimSpace(string(out)), err
}

// FileAt reads path as committed in commit (a commit hostgit holds, such
// as the base commit, which the sandbox cannot change), at most max bytes;
// ok is false when the commit has no such file.
func (g Git) FileAt(ctx context.Context, commit, path string, max int64) (content []byte, ok bool, err error) {
	if !shaRE.MatchString(commit) || strings.ContainsAny(path, "\n\x00") {
		return nil, false, errdefs.Invalid("%s:%s is not a commit's path", commit, path)
	}
	out, err := g.run(ctx, max+512, strings.NewReader(commit+":"+path+"\n"), "cat-file", "--batch")
	if err != nil {
		return nil, false, err
	}
	header, body, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(header)
	if len(f) != 3 || f[1] != "blob" {
		return nil, false, nil // "missing", or not a file
	}
	var size int64
	if _, err := fmt.Sscanf(f[2], "%d", &size); err != nil || size > max || int64(len(body)) < size {
		return nil, false, fmt.Errorf("%s in %s is over %d bytes: %w", path, commit[:12], max, errdefs.ErrTooLarge)
	}
	return []byte(body[:size]), true, nil
}
