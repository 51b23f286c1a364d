package fileapi

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Bounds of Find and Tree.
const (
	defaultFindResults = 1000
	maxFindResults     = 10000
	maxGlobBytes       = 1024
	// maxGlobStars bounds the "**" components of a glob, each of which
	// multiplies the work of matching one path.
	maxGlobStars = 4
	// MaxTreeDepth is the deepest a listing goes.
	MaxTreeDepth = 64
)

// glob is a parsed Find pattern.
type glob struct {
	// parts are the pattern's components; byName says the pattern has a
	// single component, matched against entry names at any depth.
	parts  []string
	byName bool
	// deep says a component is "**": matches may lie at any depth.
	deep bool
}

func parseGlob(op, pattern string) (glob, error) {
	bad := func(why string) (glob, error) {
		return glob{}, fmt.Errorf("%s: glob %s: %s: %w", op, quote(pattern), why, errdefs.ErrInvalid)
	}
	switch {
	case pattern == "":
		return bad("empty")
	case len(pattern) > maxGlobBytes:
		return bad(fmt.Sprintf("longer than %d bytes", maxGlobBytes))
	case strings.HasPrefix(pattern, "/"):
		return bad("absolute (patterns are relative to the directory searched)")
	case strings.ContainsAny(pattern, "\x00\\"):
		return bad("contains a NUL byte or a backslash")
	}
	g := glob{}
	stars := 0
	for part := range strings.SplitSeq(strings.TrimSuffix(pattern, "/"), "/") {
		switch part {
		case "", ".":
			continue
		case "..":
			return bad(`contains a ".." component`)
		case "**":
			stars++
			g.deep = true
		}
		if _, err := path.Match(part, ""); err != nil {
			return bad("bad pattern syntax")
		}
		g.parts = append(g.parts, part)
	}
	if stars > maxGlobStars {
		return bad(fmt.Sprintf("more than %d ** components", maxGlobStars))
	}
	if len(g.parts) == 0 {
		return bad("matches nothing")
	}
	g.byName = !strings.Contains(strings.Trim(pattern, "/"), "/")
	return g, nil
}

// match says whether rel (relative to the directory searched, components
// in elems) matches.
func (g glob) match(elems []string) bool {
	if g.byName {
		ok, _ := path.Match(g.parts[0], elems[len(elems)-1])
		return ok
	}
	return matchParts(g.parts, elems)
}

// descend says whether a directory at depth (its number of components)
// can hold a match.
func (g glob) descend(depth int) bool {
	return g.byName || g.deep || depth < len(g.parts)
}

func matchParts(pat, elems []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true
			}
			for i := 0; i <= len(elems); i++ {
				if matchParts(pat[1:], elems[i:]) {
					return true
				}
			}
			return false
		}
		if len(elems) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], elems[0]); !ok {
			return false
		}
		pat, elems = pat[1:], elems[1:]
	}
	return len(elems) == 0
}

// Find lists the entries under req.Path whose path matches req.Pattern
// (see apitypes.FindRequest), in walk order: each directory's entries by
// name, each followed by what lies inside it. Like Grep it never follows a
// symlink (a symlink is matched as what it is), never opens anything but
// directories, skips .git directories unless IncludeGit, and stops at
// MaxResults, at the walk budget (100000 entries), below 256 levels, or
// when ctx ends, saying Truncated.
func (f *FS) Find(ctx context.Context, req apitypes.FindRequest) (apitypes.FindResult, error) {
	const op = "finding"
	if req.Path == "" {
		req.Path = "."
	}
	p, err := cleanFor(op, req.Path)
	if err != nil {
		return apitypes.FindResult{}, err
	}
	g, err := parseGlob(op+" in "+p, req.Pattern)
	if err != nil {
		return apitypes.FindResult{}, err
	}
	switch req.Type {
	case "", TypeFile, TypeDir, TypeSymlink, TypeOther:
	default:
		return apitypes.FindResult{}, fmt.Errorf("%s in %s: type %q is not one of file, dir, symlink, other: %w", op, p, req.Type, errdefs.ErrInvalid)
	}
	max := req.MaxResults
	if max <= 0 {
		max = defaultFindResults
	}
	max = min(max, maxFindResults)
	res := apitypes.FindResult{Matches: []apitypes.FileInfo{}}
	w := &walker{ctx: ctx, budget: f.walkEntries, maxDepth: f.walkDepth + 1, includeGit: req.IncludeGit, depthLimits: true}
	err = f.walk(op, p, w, func(dir *os.Root, rel string, elems []string, fi fs.FileInfo) bool {
		if g.match(elems) {
			in := newInfo(rel, fi)
			if req.Type == "" || in.Type == req.Type {
				if len(res.Matches) == max {
					w.truncated, w.stop = true, true
					return false
				}
				if in.Type == TypeSymlink {
					in.LinkTarget, _ = dir.Readlink(fi.Name())
				}
				res.Matches = append(res.Matches, in)
			}
		}
		return fi.IsDir() && g.descend(len(elems))
	})
	res.Truncated = w.truncated
	return res, err
}

// Tree lists the directory p and, down to depth levels (1: p's own
// entries), the directories inside it, in walk order, with lstat
// semantics: symlinks are listed, never followed. It stops at
// MaxListEntries entries and says Truncated; .git directories are listed
// but not descended into.
func (f *FS) Tree(ctx context.Context, p string, depth int) (apitypes.FileList, error) {
	const op = "listing"
	p, err := cleanFor(op, p)
	if err != nil {
		return apitypes.FileList{}, err
	}
	if depth < 1 || depth > MaxTreeDepth {
		return apitypes.FileList{}, fmt.Errorf("%s %s: depth %d is not between 1 and %d: %w", op, p, depth, MaxTreeDepth, errdefs.ErrInvalid)
	}
	list := apitypes.FileList{Path: p, Depth: depth, Entries: []apitypes.FileInfo{}}
	w := &walker{ctx: ctx, budget: f.opts.MaxListEntries, maxDepth: depth, includeGit: false, listGit: true}
	err = f.walk(op, p, w, func(dir *os.Root, rel string, elems []string, fi fs.FileInfo) bool {
		in := newInfo(rel, fi)
		if in.Type == TypeSymlink {
			in.LinkTarget, _ = dir.Readlink(fi.Name())
		}
		list.Entries = append(list.Entries, in)
		return fi.IsDir()
	})
	list.Truncated = w.truncated
	return list, err
}

// walker is the state of one bounded walk.
type walker struct {
	ctx context.Context
	// budget is the entries left to visit; maxDepth the deepest level.
	budget, maxDepth int
	// includeGit walks into .git directories; listGit (without it) still
	// visits them, without walking in.
	includeGit, listGit bool
	// depthLimits says maxDepth is a limit (a search's), not the depth
	// asked for (a listing's): reaching it truncates.
	depthLimits     bool
	truncated, stop bool
}

// visitFunc is called for each entry (fi from lstat in dir, rel its path
// from the workspace root, elems its components below the walk's start)
// and returns whether to walk into it, if it is a directory; setting
// w.stop ends the walk.
type visitFunc func(dir *os.Root, rel string, elems []string, fi fs.FileInfo) bool

// walk visits the entries under the directory p, depth first, each
// directory's entries by name. Children are looked up in their parent's
// descriptor and directories are opened relative to it, O_DIRECTORY, after
// checking that they are still what their parent listed: nothing the
// sandbox renames can move the walk out of the subtree or make it follow
// a link. Entries that vanish mid-walk are skipped.
func (f *FS) walk(op, p string, w *walker, visit visitFunc) error {
	if err := w.ctx.Err(); err != nil {
		return classify(op, p, err)
	}
	fi, err := f.root.Lstat(p)
	if err != nil {
		return classify(op, p, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s: not a directory (%s): %w", op, p, newInfo(p, fi).Type, errdefs.ErrInvalid)
	}
	dir, err := f.openDir(p)
	if err != nil {
		return classify(op, p, err)
	}
	defer dir.Close()
	f.walkDir(w, dir, p, nil, fi, visit)
	if err := w.ctx.Err(); err != nil {
		w.truncated = true
		return classify(op, p, err)
	}
	return nil
}

func (f *FS) walkDir(w *walker, dir *os.Root, rel string, elems []string, want fs.FileInfo, visit visitFunc) {
	if self, err := dir.Lstat("."); err != nil || !os.SameFile(self, want) {
		return // swapped since it was listed
	}
	if w.budget <= 0 {
		w.truncated = true
		return
	}
	names, more, err := readNames(w.ctx, dir, w.budget)
	if err != nil {
		return
	}
	w.budget -= len(names)
	if more {
		w.truncated = true
	}
	for _, name := range names {
		if w.stop || w.ctx.Err() != nil {
			w.stop = true
			return
		}
		fi, err := dir.Lstat(name)
		if err != nil {
			continue
		}
		isGit := name == ".git" && fi.IsDir()
		if isGit && !w.includeGit && !w.listGit {
			continue
		}
		child := path.Join(rel, name)
		childElems := append(extend(elems), name)
		into := visit(dir, child, childElems, fi)
		if w.stop || !into || !fi.IsDir() || (isGit && !w.includeGit) {
			continue
		}
		if len(childElems) >= w.maxDepth {
			// A listing stops at the depth it was asked for; a search
			// that reaches its depth limit says it was cut short.
			w.truncated = w.truncated || w.depthLimits
			continue
		}
		if w.budget <= 0 {
			w.truncated = true
			continue
		}
		sub, err := dir.OpenRoot(name + "/.")
		if err != nil {
			continue
		}
		f.walkDir(w, sub, child, childElems, fi, visit)
		sub.Close()
	}
}

// extend copies elems with room for one more, so that siblings do not
// share a backing array.
func extend(elems []string) []string { return append(make([]string, 0, len(elems)+1), elems...) }
