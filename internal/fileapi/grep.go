package fileapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// GrepRequest is one search over a subtree of the workspace; GrepMatch
// one matching line; GrepResult the outcome of a Grep (package apitypes
// documents their fields).
type (
	GrepRequest = apitypes.GrepRequest
	GrepMatch   = apitypes.GrepMatch
	GrepResult  = apitypes.GrepResult
)

// Grep searches the regular text files under req.Path for lines matching
// req.Pattern, in name order. It never follows a symlink (a symlinked file
// or directory is skipped), never opens anything but a regular file, skips
// files over MaxFileBytes and files with a NUL byte in their first 8 KiB,
// and skips .git directories unless IncludeGit. Entries that vanish or fail
// to open mid-walk are skipped. If ctx ends, Grep returns what it found with
// Truncated set and the context's error.
func (f *FS) Grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	const op = "searching"
	if req.Path == "" {
		req.Path = "."
	}
	p, err := cleanFor(op, req.Path)
	if err != nil {
		return GrepResult{}, err
	}
	if len(req.Pattern) > grepMaxPattern {
		return GrepResult{}, fmt.Errorf("%s %s: pattern longer than %d bytes: %w", op, p, grepMaxPattern, errdefs.ErrInvalid)
	}
	pattern := req.Pattern
	if req.IgnoreCase {
		pattern = "(?i)" + pattern
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return GrepResult{}, fmt.Errorf("%s %s: bad pattern: %v: %w", op, p, err, errdefs.ErrInvalid)
	}
	g := &grepper{
		ctx:        ctx,
		re:         re,
		maxMatches: req.MaxMatches,
		maxFile:    req.MaxFileBytes,
		includeGit: req.IncludeGit,
		walkBudget: f.walkEntries,
		maxDepth:   f.walkDepth,
		res:        GrepResult{Matches: []GrepMatch{}},
	}
	if g.maxMatches <= 0 {
		g.maxMatches = defaultGrepMatches
	}
	g.maxMatches = min(g.maxMatches, maxGrepMatches)
	if g.maxFile <= 0 {
		g.maxFile = defaultGrepFileSize
	}
	g.maxFile = min(g.maxFile, f.opts.MaxReadBytes)

	if err := ctx.Err(); err != nil {
		return GrepResult{}, classify(op, p, err)
	}
	fi, err := f.root.Lstat(p)
	if err != nil {
		return GrepResult{}, classify(op, p, err)
	}
	switch {
	case fi.IsDir():
		dir, err := f.openDir(p)
		if err != nil {
			return GrepResult{}, classify(op, p, err)
		}
		g.walkDir(dir, p, fi, 0)
		dir.Close()
	case fi.Mode().IsRegular():
		g.grepFile(f.root, p, p, fi)
	}
	if err := ctx.Err(); err != nil {
		g.res.Truncated = true
		return g.res, classify(op, p, err)
	}
	return g.res, nil
}

// grepper is the state of one Grep walk.
type grepper struct {
	ctx        context.Context
	re         *regexp.Regexp
	maxMatches int
	maxFile    int64
	includeGit bool
	walkBudget int // entries left to visit
	maxDepth   int
	budgetOut  bool // the entry budget is spent: descend no further
	done       bool // stop the walk: matches or ctx exhausted
	res        GrepResult
}

func (g *grepper) stop() bool {
	if !g.done && g.ctx.Err() != nil {
		g.done = true
	}
	return g.done
}

// walkDir searches the directory open as dir, which the parent's lstat
// described as want. Children are looked up in dir's descriptor by name,
// so nothing the sandbox renames can move the walk outside the subtree.
func (g *grepper) walkDir(dir *os.Root, rel string, want fs.FileInfo, depth int) {
	if g.stop() {
		return
	}
	// A directory swapped for a symlink between the parent's lstat and the
	// open resolves elsewhere inside the workspace; skip it.
	if self, err := dir.Lstat("."); err != nil || !os.SameFile(self, want) {
		return
	}
	names, more, err := readNames(g.ctx, dir, g.walkBudget)
	if err != nil {
		return
	}
	g.walkBudget -= len(names)
	if more {
		// Finish the names already counted, but open no more directories.
		g.res.Truncated = true
		g.budgetOut = true
	}
	for _, name := range names {
		if g.stop() {
			return
		}
		fi, err := dir.Lstat(name)
		if err != nil {
			continue
		}
		child := path.Join(rel, name)
		switch {
		case fi.IsDir():
			if name == ".git" && !g.includeGit {
				continue
			}
			if g.budgetOut {
				continue
			}
			if depth+1 > g.maxDepth {
				g.res.Truncated = true
				continue
			}
			sub, err := dir.OpenRoot(name + "/.")
			if err != nil {
				continue
			}
			g.walkDir(sub, child, fi, depth+1)
			sub.Close()
		case fi.Mode().IsRegular():
			if fi.Size() <= g.maxFile {
				g.grepFile(dir, name, child, fi)
			}
		}
		// Symlinks, FIFOs, sockets and devices are never opened.
	}
}

// grepFile searches name in dir, if it is still the regular file want.
func (g *grepper) grepFile(dir *os.Root, name, rel string, want fs.FileInfo) {
	if g.stop() {
		return
	}
	file, err := dir.OpenFile(name, os.O_RDONLY|oNonblock|oNofollow, 0)
	if err != nil {
		return
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, want) || fi.Size() > g.maxFile {
		return
	}
	data, err := io.ReadAll(io.LimitReader(ctxReader{g.ctx, file}, g.maxFile+1))
	if err != nil || int64(len(data)) > g.maxFile {
		return
	}
	if bytes.IndexByte(data[:min(len(data), binarySniffBytes)], 0) >= 0 {
		return
	}
	g.res.FilesScanned++
	for line := 1; len(data) > 0; line++ {
		if line%4096 == 0 && g.stop() {
			return
		}
		text := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			text, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if !g.re.Match(text) {
			continue
		}
		if len(g.res.Matches) == g.maxMatches {
			g.res.Truncated = true
			g.done = true
			return
		}
		g.res.Matches = append(g.res.Matches, GrepMatch{Path: rel, Line: line, Text: cutText(text)})
	}
}

// cutText drops a trailing CR and cuts to grepTextBytes on a rune boundary.
func cutText(b []byte) string {
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) <= grepTextBytes {
		return string(b)
	}
	n := grepTextBytes
	for n > grepTextBytes-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n])
}
