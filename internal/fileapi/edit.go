package fileapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Bounds of an edit.
const (
	// maxEditText caps Old and New.
	maxEditText = 1 << 20
	// nearMissFileBytes is the largest file whose near misses are looked
	// for when Old is not in it.
	nearMissFileBytes = 4 << 20
	// nearMissWork caps the line comparisons of that search.
	nearMissWork = 20_000_000
	// maxNearMisses is how many near misses an error quotes.
	maxNearMisses = 3
	// maxQuote is how much of a line an error quotes.
	maxQuote = 120
)

// Edit replaces req.Old by req.New in the regular file req.Path: exactly
// one occurrence, or every one with req.All. Old must be there exactly as
// given: when it is not, the error (ErrConflict) quotes the lines that
// come closest (the same text but for whitespace or case, or lines like its
// first line); when it occurs more than once without All, the error names
// the lines where it does. The new content is written as Write writes
// (atomically, durably, keeping the file's mode), and only if the file did
// not change since it was read. A symlink is refused, with its target
// named, rather than replaced by a file.
func (f *FS) Edit(ctx context.Context, req apitypes.EditRequest) (apitypes.EditResult, error) {
	const op = "editing"
	p, err := cleanFor(op, req.Path)
	if err != nil {
		return apitypes.EditResult{}, err
	}
	switch {
	case req.Old == "":
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the old text is empty: %w", op, p, errdefs.ErrInvalid)
	case len(req.Old) > maxEditText || len(req.New) > maxEditText:
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the old or new text is over %d bytes: %w", op, p, maxEditText, errdefs.ErrTooLarge)
	case req.Old == req.New:
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the old and new text are the same: %w", op, p, errdefs.ErrInvalid)
	case p == ".":
		return apitypes.EditResult{}, fmt.Errorf("%s %s: is the workspace root: %w", op, p, errdefs.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return apitypes.EditResult{}, classify(op, p, err)
	}
	before, err := f.root.Lstat(p)
	if err != nil {
		return apitypes.EditResult{}, classify(op, p, err)
	}
	if before.Mode().Type() == os.ModeSymlink {
		target, _ := f.root.Readlink(p)
		return apitypes.EditResult{}, fmt.Errorf("%s %s: is a symlink (to %q): edit the file it points to: %w", op, p, target, errdefs.ErrInvalid)
	}
	file, fi, err := f.openRegular(ctx, op, p)
	if err != nil {
		return apitypes.EditResult{}, err
	}
	limit := min(f.opts.MaxReadBytes, f.opts.MaxWriteBytes)
	if fi.Size() > limit {
		file.Close()
		return apitypes.EditResult{}, fmt.Errorf("%s %s: %d bytes, over the %d-byte edit limit: %w", op, p, fi.Size(), limit, errdefs.ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(ctxReader{ctx, file}, limit+1))
	file.Close()
	if err != nil {
		return apitypes.EditResult{}, classify(op, p, err)
	}
	if int64(len(data)) > limit {
		return apitypes.EditResult{}, fmt.Errorf("%s %s: grew past the %d-byte edit limit: %w", op, p, limit, errdefs.ErrTooLarge)
	}
	if !os.SameFile(before, fi) {
		return apitypes.EditResult{}, fmt.Errorf("%s %s: replaced while being read; try again: %w", op, p, errdefs.ErrConflict)
	}

	content := string(data)
	var at []int // byte offsets of the occurrences
	for i := 0; ; {
		j := strings.Index(content[i:], req.Old)
		if j < 0 {
			break
		}
		at = append(at, i+j)
		i += j + len(req.Old)
	}
	lines := make([]int, len(at))
	for k, off := range at {
		lines[k] = 1 + strings.Count(content[:off], "\n")
	}
	switch {
	case len(at) == 0:
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the old text is not in the file%s: %w", op, p, nearMisses(content, req.Old), errdefs.ErrConflict)
	case len(at) > 1 && !req.All:
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the old text occurs %d times (at lines %s): add context to make it unique, or replace all: %w",
			op, p, len(at), lineList(lines), errdefs.ErrConflict)
	}
	out := strings.Replace(content, req.Old, req.New, len(at))
	if int64(len(out)) > f.opts.MaxWriteBytes {
		return apitypes.EditResult{}, fmt.Errorf("%s %s: the result is over the %d-byte write limit: %w", op, p, f.opts.MaxWriteBytes, errdefs.ErrTooLarge)
	}
	// The sandbox may write the file at any time: refuse to overwrite a
	// change made since it was read rather than lose it.
	if now, err := f.root.Lstat(p); err != nil || !os.SameFile(now, fi) || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
		return apitypes.EditResult{}, fmt.Errorf("%s %s: changed while being edited; try again: %w", op, p, errdefs.ErrConflict)
	}
	info, err := f.Write(ctx, p, strings.NewReader(out), 0, false)
	if err != nil {
		return apitypes.EditResult{}, err
	}
	return apitypes.EditResult{Path: p, Replacements: len(at), Lines: lines, Size: info.Size}, nil
}

// lineList prints line numbers, at most ten of them.
func lineList(lines []int) string {
	var b strings.Builder
	for i, n := range lines {
		if i == 10 {
			fmt.Fprintf(&b, ", ... (%d more)", len(lines)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, n)
	}
	return b.String()
}

// nearMisses describes, for an error, where the file holds text close to
// old: the same lines but for whitespace and case, or else the lines most
// like old's first line. It returns "" when nothing comes close or the
// file is too large to search.
func nearMisses(content, old string) string {
	if len(content) > nearMissFileBytes {
		return ""
	}
	fileLines := strings.Split(content, "\n")
	norm := make([]string, len(fileLines))
	for i, l := range fileLines {
		norm[i] = normalize(l)
	}
	var want []string
	for _, l := range strings.Split(old, "\n") {
		want = append(want, normalize(l))
	}
	// Leading and trailing blank lines of old say little.
	for len(want) > 0 && want[0] == "" {
		want = want[1:]
	}
	for len(want) > 0 && want[len(want)-1] == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return ""
	}
	var found []string
	if len(norm)*len(want) <= nearMissWork {
		for i := 0; i+len(want) <= len(norm) && len(found) < maxNearMisses; i++ {
			if slices.Equal(norm[i:i+len(want)], want) {
				found = append(found, fmt.Sprintf("line %d has it but for whitespace or case: %s", i+1, quoteLines(fileLines[i:i+len(want)])))
			}
		}
	}
	if len(found) > 0 {
		return "; " + strings.Join(found, "; ")
	}
	// Lines like old's first line, best first.
	first := want[0]
	type cand struct {
		line  int
		score float64
	}
	var cands []cand
	grams := bigrams(first)
	if len(norm) <= nearMissWork/64 {
		for i, l := range norm {
			if s := dice(grams, bigrams(l)); s >= 0.6 {
				cands = append(cands, cand{i, s})
			}
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	for _, c := range cands[:min(len(cands), maxNearMisses)] {
		found = append(found, fmt.Sprintf("line %d is like its first line: %s", c.line+1, quote(fileLines[c.line])))
	}
	if len(found) == 0 {
		return "; no line is like its first line " + quote(strings.TrimSpace(strings.SplitN(old, "\n", 2)[0]))
	}
	return "; " + strings.Join(found, "; ")
}

// normalize folds case and collapses runs of white space.
func normalize(s string) string {
	return strings.ToLower(strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " "))
}

// bigrams are the pairs of adjacent bytes of s, counted.
func bigrams(s string) map[string]int {
	g := make(map[string]int, len(s))
	for i := 0; i+2 <= len(s); i++ {
		g[s[i:i+2]]++
	}
	return g
}

// dice is the Sørensen–Dice similarity of two bigram multisets.
func dice(a, b map[string]int) float64 {
	na, nb := 0, 0
	for _, n := range a {
		na += n
	}
	for _, n := range b {
		nb += n
	}
	if na+nb == 0 {
		return 0
	}
	common := 0
	for g, n := range a {
		common += min(n, b[g])
	}
	return 2 * float64(common) / float64(na+nb)
}

func quote(s string) string {
	s = string(bytes.TrimSuffix([]byte(s), []byte("\r")))
	if len(s) > maxQuote {
		return fmt.Sprintf("%q...", s[:maxQuote])
	}
	return fmt.Sprintf("%q", s)
}

func quoteLines(ls []string) string {
	return quote(strings.Join(ls, "\n"))
}
