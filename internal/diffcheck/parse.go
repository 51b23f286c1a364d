package diffcheck

import (
	"bytes"
	"strconv"
	"strings"
)

// fileDiff is what Check needs of one file's part of a git diff.
type fileDiff struct {
	// oldPath and newPath are the paths of the ---/+++ lines (or of the
	// "diff --git" line when a binary or mode-only change has none),
	// without the a/ b/ prefixes; empty for /dev/null.
	oldPath, newPath string
	// renameFrom and renameTo are set for a rename.
	renameFrom, renameTo string
	// created and deleted say the file is new or gone.
	created, deleted bool
	// added are the added lines of text hunks; binary patches add none.
	added []addedLine
}

// addedLine is one added line, without its "+" and line end.
type addedLine struct {
	num  int
	text []byte
}

// secretPath is the name a finding in f goes under: the file's name after
// the change.
func (f *fileDiff) secretPath() string {
	for _, p := range []string{f.newPath, f.renameTo, f.oldPath, f.renameFrom} {
		if p != "" {
			return p
		}
	}
	return ""
}

// maxLineNumber bounds hunk positions so that hostile numbers cannot
// overflow the line counter.
const maxLineNumber = 1 << 40

// parseDiff reads a git unified diff. It tracks each hunk's line counts so
// that an added line reading "+++ x" or "diff --git" is content, not a
// header. Anything it does not understand is skipped.
func parseDiff(diff []byte) []fileDiff {
	var (
		files    []fileDiff
		cur      *fileDiff
		binary   bool // skip the rest of cur: a binary patch
		inHunk   bool
		oldLeft  int // lines of the current hunk still to come
		newLeft  int
		lineNum  int // line number of the next new-side line
		sawPaths bool
	)
	for len(diff) > 0 {
		var line []byte
		if i := bytes.IndexByte(diff, '\n'); i >= 0 {
			line, diff = diff[:i], diff[i+1:]
		} else {
			line, diff = diff, nil
		}
		if inHunk {
			if oldLeft <= 0 && newLeft <= 0 {
				inHunk = false
			} else {
				switch {
				case len(line) == 0 || line[0] == ' ':
					// An empty line is a context line whose space an
					// editor or mailer stripped.
					oldLeft--
					newLeft--
					lineNum++
					continue
				case line[0] == '+':
					cur.added = append(cur.added, addedLine{num: lineNum, text: bytes.TrimSuffix(line[1:], []byte("\r"))})
					newLeft--
					lineNum++
					continue
				case line[0] == '-':
					oldLeft--
					continue
				case line[0] == '\\': // "\ No newline at end of file"
					continue
				}
				inHunk = false // malformed: read the line as a header
			}
		}
		s := string(line)
		if rest, ok := strings.CutPrefix(s, "diff --git "); ok {
			files = append(files, fileDiff{})
			cur = &files[len(files)-1]
			binary, sawPaths = false, false
			cur.oldPath, cur.newPath = parseGitHeader(rest)
			continue
		}
		if cur == nil || binary {
			continue
		}
		switch {
		case strings.HasPrefix(s, "@@ "):
			o, n, start, ok := parseHunkHeader(s)
			if !ok {
				continue
			}
			inHunk, oldLeft, newLeft, lineNum = true, o, n, max(start, 1)
		case strings.HasPrefix(s, "GIT binary patch"), strings.HasPrefix(s, "Binary files "):
			binary = true
		case strings.HasPrefix(s, "--- "):
			p := headerPath(s[4:], "a/")
			if !sawPaths {
				// The ---/+++ pair names the file exactly; the
				// "diff --git" guess gives way to it.
				cur.oldPath, cur.newPath, sawPaths = p, "", true
			} else {
				cur.oldPath = p
			}
		case strings.HasPrefix(s, "+++ "):
			cur.newPath = headerPath(s[4:], "b/")
			sawPaths = true
		case strings.HasPrefix(s, "rename from "):
			cur.renameFrom = unquote(s[len("rename from "):])
		case strings.HasPrefix(s, "rename to "):
			cur.renameTo = unquote(s[len("rename to "):])
		case strings.HasPrefix(s, "new file mode "):
			cur.created = true
		case strings.HasPrefix(s, "deleted file mode "):
			cur.deleted = true
		}
	}
	return files
}

// parseHunkHeader reads "@@ -a,b +c,d @@": the old and new line counts
// and the first new line.
func parseHunkHeader(s string) (oldCount, newCount, newStart int, ok bool) {
	fields := strings.Fields(s)
	if len(fields) < 4 || fields[3] != "@@" || !strings.HasPrefix(fields[1], "-") || !strings.HasPrefix(fields[2], "+") {
		return 0, 0, 0, false
	}
	_, oldCount, ok1 := parseRange(fields[1][1:])
	newStart, newCount, ok2 := parseRange(fields[2][1:])
	return oldCount, newCount, newStart, ok1 && ok2
}

// parseRange reads "start,count" or "start" (count 1).
func parseRange(s string) (start, count int, ok bool) {
	a, b, hasCount := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	if err != nil || start < 0 || start > maxLineNumber {
		return 0, 0, false
	}
	count = 1
	if hasCount {
		if count, err = strconv.Atoi(b); err != nil || count < 0 || count > maxLineNumber {
			return 0, 0, false
		}
	}
	return start, count, true
}

// headerPath reads the path of a ---/+++ line: quoted or not, a tab and
// what follows it dropped (git adds a tab after a name with a space; other
// diffs add a timestamp), the prefix removed; "" for /dev/null.
func headerPath(s, prefix string) string {
	if !strings.HasPrefix(s, `"`) {
		s, _, _ = strings.Cut(s, "\t")
	}
	if s == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(unquote(s), prefix)
}

// parseGitHeader reads the paths of "diff --git a/X b/Y". Unquoted names
// with spaces are ambiguous there; git's own answer is that both names are
// the same unless rename lines follow, so an unquoted line is split in
// the middle. It returns "" for what it cannot read.
func parseGitHeader(s string) (oldPath, newPath string) {
	var a, b string
	switch {
	case strings.HasPrefix(s, `"`):
		q, rest, ok := unquotePrefix(s)
		if !ok || !strings.HasPrefix(rest, " ") {
			return "", ""
		}
		a, b = q, unquote(rest[1:])
	case strings.HasSuffix(s, `"`) && strings.Contains(s, ` "`):
		i := strings.LastIndex(s, ` "`)
		a, b = s[:i], unquote(s[i+1:])
	default:
		if len(s)%2 == 0 || s[len(s)/2] != ' ' {
			return "", ""
		}
		a, b = s[:len(s)/2], s[len(s)/2+1:]
	}
	if !strings.HasPrefix(a, "a/") || !strings.HasPrefix(b, "b/") {
		return "", ""
	}
	return a[2:], b[2:]
}

// unquote undoes git's C-style quoting of a path when s is quoted, and
// returns s unchanged otherwise (or when the quoting is malformed).
func unquote(s string) string {
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	q, rest, ok := unquotePrefix(s)
	if !ok || rest != "" {
		return s
	}
	return q
}

// unquotePrefix reads the quoted string at the start of s and returns it
// with the rest of s.
func unquotePrefix(s string) (q, rest string, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), s[i+1:], true
		case '\\':
			i++
			if i >= len(s) {
				return "", "", false
			}
			switch e := s[i]; e {
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'v':
				b.WriteByte('\v')
			case 'f':
				b.WriteByte('\f')
			case 'r':
				b.WriteByte('\r')
			case '"', '\\':
				b.WriteByte(e)
			case '0', '1', '2', '3':
				if i+2 >= len(s) || !isOctal(s[i+1]) || !isOctal(s[i+2]) {
					return "", "", false
				}
				b.WriteByte((e-'0')<<6 | (s[i+1]-'0')<<3 | (s[i+2] - '0'))
				i += 2
			default:
				return "", "", false
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
