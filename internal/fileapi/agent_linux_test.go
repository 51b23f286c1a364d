package fileapi

// The file tools shaped for agents: ranged reads, exact-string edits,
// find by glob and recursive listings. Their hostile-path cases run with
// every other verb in hostile_linux_test.go (allVerbs).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestParseLines(t *testing.T) {
	tests := []struct {
		in          string
		first, last int
		bad         bool
	}{
		{"40:80", 40, 80, false},
		{"40:", 40, 0, false},
		{":80", 1, 80, false},
		{"7", 7, 7, false},
		{"1:1", 1, 1, false},
		{"", 0, 0, true},
		{":", 0, 0, true},
		{"0:5", 0, 0, true},
		{"5:4", 0, 0, true},
		{"-3:", 0, 0, true},
		{"a:b", 0, 0, true},
		{"1:2:3", 0, 0, true},
		{"99999999999999999999", 0, 0, true},
	}
	for _, tt := range tests {
		first, last, err := ParseLines(tt.in)
		if tt.bad {
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("ParseLines(%q) = %d, %d, %v; want ErrInvalid", tt.in, first, last, err)
			}
			continue
		}
		if err != nil || first != tt.first || last != tt.last {
			t.Errorf("ParseLines(%q) = %d, %d, %v; want %d, %d", tt.in, first, last, err, tt.first, tt.last)
		}
	}
	for in, want := range map[string][2]int64{"0:10": {0, 10}, "100:": {100, 0}, "5:1": {5, 1}} {
		off, n, err := ParseBytes(in)
		if err != nil || off != want[0] || n != want[1] {
			t.Errorf("ParseBytes(%q) = %d, %d, %v; want %v", in, off, n, err, want)
		}
	}
	for _, in := range []string{"", "10", ":5", "-1:3", "3:0", "3:-1", "x:1"} {
		if _, _, err := ParseBytes(in); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseBytes(%q) = %v, want ErrInvalid", in, err)
		}
	}
}

func TestReadRange(t *testing.T) {
	e := newEnv(t, noOwner)
	var lines []string
	for i := 1; i <= 100; i++ {
		lines = append(lines, "line "+strings.Repeat("x", i%7)+string(rune('0'+i%10)))
	}
	text := strings.Join(lines, "\n") + "\n"
	e.writeFile(t, "f.txt", text)
	e.writeFile(t, "crlf.txt", "a\r\nb\r\nc")
	e.writeFile(t, "empty", "")
	lineAt := func(n int) int64 { // byte offset of line n
		return int64(len(strings.Join(lines[:n-1], "\n")) + 1)
	}

	tests := []struct {
		name string
		path string
		r    Range
		want string
		meta apitypes.FileContent
	}{
		{"lines 40:42", "f.txt", Range{FirstLine: 40, LastLine: 42}, strings.Join(lines[39:42], "\n") + "\n",
			apitypes.FileContent{FirstLine: 40, LastLine: 42, Offset: lineAt(40), EOF: false}},
		{"line 1", "f.txt", Range{FirstLine: 1, LastLine: 1}, lines[0] + "\n",
			apitypes.FileContent{FirstLine: 1, LastLine: 1, Offset: 0}},
		{"to the end", "f.txt", Range{FirstLine: 99}, lines[98] + "\n" + lines[99] + "\n",
			apitypes.FileContent{FirstLine: 99, LastLine: 100, Offset: lineAt(99), EOF: true}},
		{"last line exactly", "f.txt", Range{FirstLine: 98, LastLine: 100}, strings.Join(lines[97:], "\n") + "\n",
			apitypes.FileContent{FirstLine: 98, LastLine: 100, Offset: lineAt(98), EOF: true}},
		{"past the end", "f.txt", Range{FirstLine: 200, LastLine: 210}, "",
			apitypes.FileContent{FirstLine: 200, Offset: int64(len(text)), EOF: true}},
		{"no final newline", "crlf.txt", Range{FirstLine: 2, LastLine: 9}, "b\r\nc",
			apitypes.FileContent{FirstLine: 2, LastLine: 3, Offset: 3, EOF: true}},
		{"bytes", "f.txt", Range{Offset: 5, Length: 10}, text[5:15],
			apitypes.FileContent{Offset: 5}},
		{"bytes to the end", "f.txt", Range{Offset: int64(len(text)) - 4}, text[len(text)-4:],
			apitypes.FileContent{Offset: int64(len(text)) - 4, EOF: true}},
		{"bytes past the end", "f.txt", Range{Offset: 1 << 40, Length: 3}, "",
			apitypes.FileContent{Offset: int64(len(text)), EOF: true}},
		{"whole", "crlf.txt", Range{}, "a\r\nb\r\nc", apitypes.FileContent{EOF: true}},
		{"empty file", "empty", Range{FirstLine: 1, LastLine: 3}, "", apitypes.FileContent{FirstLine: 1, EOF: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			fc, err := e.fs.ReadRange(t.Context(), tt.path, tt.r, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("content = %q, want %q", buf.String(), tt.want)
			}
			st, _ := os.Stat(e.path(tt.path))
			want := tt.meta
			want.Path, want.Size, want.Length = tt.path, st.Size(), int64(len(tt.want))
			if diff := cmp.Diff(want, fc); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
		})
	}

	// Numbered lines for JSON, CR dropped, exact bytes in content.
	var buf bytes.Buffer
	fc, err := e.fs.ReadRange(t.Context(), "crlf.txt", Range{FirstLine: 1, LastLine: 2}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	fc = Content(fc, buf.Bytes())
	if diff := cmp.Diff([]apitypes.Line{{N: 1, Text: "a"}, {N: 2, Text: "b"}}, fc.Lines); diff != "" || fc.Content != "a\r\nb\r\n" || fc.Encoding != "utf-8" {
		t.Errorf("Content = %+v (-want +got lines):\n%s", fc, diff)
	}
	if fc := Content(apitypes.FileContent{}, []byte{0xff, 0}); fc.Encoding != "base64" || fc.Content != "/wA=" || fc.Lines != nil {
		t.Errorf("binary Content = %+v", fc)
	}

	// Refusals.
	small := newEnv(t, Options{UID: -1, GID: -1, MaxReadBytes: 64})
	small.writeFile(t, "big", strings.Repeat("0123456789\n", 100))
	if err := syscall.Mkfifo(small.path("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		p    string
		r    Range
		want error
	}{
		"over the cap by lines": {"big", Range{FirstLine: 1, LastLine: 7}, errdefs.ErrTooLarge},
		"over the cap by bytes": {"big", Range{Length: 65}, errdefs.ErrTooLarge},
		"rest over the cap":     {"big", Range{Offset: 10}, errdefs.ErrTooLarge},
		"lines and bytes":       {"big", Range{FirstLine: 1, Offset: 3}, errdefs.ErrInvalid},
		"negative":              {"big", Range{Offset: -1}, errdefs.ErrInvalid},
		"backwards":             {"big", Range{FirstLine: 5, LastLine: 2}, errdefs.ErrInvalid},
		"fifo":                  {"fifo", Range{FirstLine: 1}, errdefs.ErrInvalid},
		"directory":             {".", Range{FirstLine: 1}, errdefs.ErrInvalid},
		"missing":               {"nope", Range{FirstLine: 1}, errdefs.ErrNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			within(t, safety, "ReadRange", func() { _, err = small.fs.ReadRange(t.Context(), tc.p, tc.r, &bytes.Buffer{}) })
			if !errors.Is(err, tc.want) {
				t.Errorf("ReadRange(%q, %+v) = %v, want %v", tc.p, tc.r, err, tc.want)
			}
		})
	}
	// A range of a file larger than the read cap works: only the range
	// counts.
	var part bytes.Buffer
	if _, err := small.fs.ReadRange(t.Context(), "big", Range{FirstLine: 50, LastLine: 51}, &part); err != nil || part.String() != "0123456789\n0123456789\n" {
		t.Errorf("two lines of a file over the cap = %q, %v", part.String(), err)
	}
}

func TestEdit(t *testing.T) {
	e := newEnv(t, Options{UID: 1234, GID: 5678})
	if os.Geteuid() != 0 {
		e = newEnv(t, noOwner)
	}
	src := "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n}\n"
	e.writeFile(t, "main.go", src)
	if err := os.Chmod(e.path("main.go"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	// Exactly once.
	res, err := e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "func main() {", New: "func main() { // entry"})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(src, "func main() {", "func main() { // entry", 1)
	if diff := cmp.Diff(apitypes.EditResult{Path: "main.go", Replacements: 1, Lines: []int{3}, Size: int64(len(want))}, res); diff != "" {
		t.Errorf("Edit (-want +got):\n%s", diff)
	}
	got, _ := os.ReadFile(e.path("main.go"))
	st, _ := os.Stat(e.path("main.go"))
	if string(got) != want || st.Mode().Perm() != 0o755 {
		t.Errorf("after edit: %q mode %v", got, st.Mode())
	}
	if os.Geteuid() == 0 {
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 1234 || sys.Gid != 5678 {
			t.Errorf("edited file owned by %d:%d, want 1234:5678", sys.Uid, sys.Gid)
		}
	}

	// Twice without All: refused, naming both lines; nothing changes.
	_, err = e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "println(\"hi\")", New: "println(\"bye\")"})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "2 times (at lines 4, 5)") {
		t.Errorf("ambiguous edit = %v", err)
	}
	if now, _ := os.ReadFile(e.path("main.go")); string(now) != want {
		t.Errorf("a refused edit changed the file: %q", now)
	}
	// With All, both.
	res, err = e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "println(\"hi\")", New: "println(\"bye\")", All: true})
	if err != nil || res.Replacements != 2 || !cmp.Equal(res.Lines, []int{4, 5}) {
		t.Errorf("edit all = %+v, %v", res, err)
	}
	want = strings.ReplaceAll(want, "println(\"hi\")", "println(\"bye\")")
	if now, _ := os.ReadFile(e.path("main.go")); string(now) != want {
		t.Errorf("after edit all: %q", now)
	}
	// Deleting text.
	if _, err := e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: " // entry", New: ""}); err != nil {
		t.Fatal(err)
	}
	want = strings.Replace(want, " // entry", "", 1)

	// Near misses: the same text but for whitespace and case, and a line
	// like the first line of the old text.
	_, err = e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "FUNC main()  {\n    println(\"bye\")", New: "x"})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "line 3 has it but for whitespace or case") {
		t.Errorf("whitespace near miss = %v", err)
	}
	_, err = e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "println(\"byte\")\n}", New: "x"})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), `line 4 is like its first line: "\tprintln(\"bye\")"`) {
		t.Errorf("similar line near miss = %v", err)
	}
	_, err = e.fs.Edit(ctx, apitypes.EditRequest{Path: "main.go", Old: "zzzzqqqq", New: "x"})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "not in the file; no line is like") {
		t.Errorf("no near miss = %v", err)
	}
	if now, _ := os.ReadFile(e.path("main.go")); string(now) != want {
		t.Errorf("refused edits changed the file: %q", now)
	}

	// Refusals, each leaving everything as it was.
	e.writeFile(t, "target.txt", "abc\n")
	e.symlink(t, "target.txt", "link")
	if err := syscall.Mkfifo(e.path("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		req  apitypes.EditRequest
		want error
		msg  string
	}{
		"empty old":   {apitypes.EditRequest{Path: "target.txt", New: "x"}, errdefs.ErrInvalid, "old text is empty"},
		"same":        {apitypes.EditRequest{Path: "target.txt", Old: "abc", New: "abc"}, errdefs.ErrInvalid, "the same"},
		"symlink":     {apitypes.EditRequest{Path: "link", Old: "abc", New: "x"}, errdefs.ErrInvalid, `symlink (to "target.txt")`},
		"fifo":        {apitypes.EditRequest{Path: "fifo", Old: "abc", New: "x"}, errdefs.ErrInvalid, "not a regular file"},
		"dir":         {apitypes.EditRequest{Path: ".", Old: "abc", New: "x"}, errdefs.ErrInvalid, "root"},
		"missing":     {apitypes.EditRequest{Path: "nope", Old: "abc", New: "x"}, errdefs.ErrNotFound, "nope"},
		"huge old":    {apitypes.EditRequest{Path: "target.txt", Old: strings.Repeat("a", maxEditText+1), New: "x"}, errdefs.ErrTooLarge, "over"},
		"bad path":    {apitypes.EditRequest{Path: "../outside/canary", Old: "canary", New: "x"}, errdefs.ErrInvalid, "invalid path"},
		"escape link": {apitypes.EditRequest{Path: "out/canary", Old: "canary", New: "x"}, errdefs.ErrInvalid, "outside the workspace"},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "escape link" {
				os.Remove(e.path("out"))
				e.symlink(t, e.outside, "out")
			}
			var err error
			within(t, safety, "Edit", func() { _, err = e.fs.Edit(ctx, tc.req) })
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Edit(%+v) = %v, want %v mentioning %q", tc.req.Path, err, tc.want, tc.msg)
			}
			if now, _ := os.ReadFile(e.path("target.txt")); string(now) != "abc\n" {
				t.Errorf("target changed: %q", now)
			}
			e.checkOutside(t)
		})
	}
	// Through an inside link's directory the edit reaches the file inside.
	if err := os.Mkdir(e.path("real"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.writeFile(t, "real/f", "one\n")
	e.symlink(t, "real", "alias")
	if _, err := e.fs.Edit(ctx, apitypes.EditRequest{Path: "alias/f", Old: "one", New: "two"}); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(e.path("real/f")); string(now) != "two\n" {
		t.Errorf("edit through an inside directory link: %q", now)
	}
	e.checkOutside(t)
	// No temporary file is left behind.
	es, _ := os.ReadDir(e.ws)
	for _, de := range es {
		if strings.HasPrefix(de.Name(), tempPrefix) {
			t.Errorf("left %s", de.Name())
		}
	}
}

// treeOf lists the paths of infos.
func pathsOf(infos []apitypes.FileInfo) []string {
	out := []string{}
	for _, in := range infos {
		s := in.Path
		if in.Type == TypeDir {
			s += "/"
		}
		if in.Type == TypeSymlink {
			s += " -> " + in.LinkTarget
		}
		out = append(out, s)
	}
	return out
}

func agentTree(t *testing.T, e *env) {
	t.Helper()
	for _, p := range []string{"main.go", "README.md", "src/a.go", "src/a_test.go", "src/deep/b.go", "src/deep/er/c.go",
		"docs/x.md", ".git/config", ".git/objects/ab/cd", "vendor/.git/HEAD"} {
		e.writeFile(t, p, "x\n")
	}
	e.symlink(t, e.outside, "out")
	e.symlink(t, "src", "srclink")
	e.symlink(t, "../outside/canary", "src/canary.go")
}

func TestFind(t *testing.T) {
	e := newEnv(t, noOwner)
	agentTree(t, e)
	tests := []struct {
		req  apitypes.FindRequest
		want []string
	}{
		{apitypes.FindRequest{Pattern: "*.go"}, []string{"main.go", "src/a.go", "src/a_test.go", "src/canary.go -> ../outside/canary", "src/deep/b.go", "src/deep/er/c.go"}},
		{apitypes.FindRequest{Pattern: "*.go", Type: "file"}, []string{"main.go", "src/a.go", "src/a_test.go", "src/deep/b.go", "src/deep/er/c.go"}},
		{apitypes.FindRequest{Pattern: "src/*.go"}, []string{"src/a.go", "src/a_test.go", "src/canary.go -> ../outside/canary"}},
		{apitypes.FindRequest{Pattern: "src/**/*.go", Type: "file"}, []string{"src/a.go", "src/a_test.go", "src/deep/b.go", "src/deep/er/c.go"}},
		{apitypes.FindRequest{Pattern: "**/deep"}, []string{"src/deep/"}},
		{apitypes.FindRequest{Pattern: "*_test.go", Path: "src"}, []string{"src/a_test.go"}},
		{apitypes.FindRequest{Pattern: "deep/*/*.go", Path: "src"}, []string{"src/deep/er/c.go"}},
		{apitypes.FindRequest{Pattern: "*", Type: "symlink"}, []string{"out -> " + e.outside, "src/canary.go -> ../outside/canary", "srclink -> src"}},
		{apitypes.FindRequest{Pattern: "config"}, []string{}},
		{apitypes.FindRequest{Pattern: "config", IncludeGit: true}, []string{".git/config"}},
		{apitypes.FindRequest{Pattern: "HEAD", IncludeGit: true}, []string{"vendor/.git/HEAD"}},
		{apitypes.FindRequest{Pattern: "canary"}, []string{}},
		{apitypes.FindRequest{Pattern: "[ab].go"}, []string{"src/a.go", "src/deep/b.go"}},
	}
	for _, tt := range tests {
		res, err := e.fs.Find(t.Context(), tt.req)
		if err != nil {
			t.Errorf("Find(%+v) = %v", tt.req, err)
			continue
		}
		if diff := cmp.Diff(tt.want, pathsOf(res.Matches)); diff != "" || res.Truncated {
			t.Errorf("Find(%+v) truncated %v (-want +got):\n%s", tt.req, res.Truncated, diff)
		}
	}
	// Bounded: results, entries, depth.
	if res, err := e.fs.Find(t.Context(), apitypes.FindRequest{Pattern: "*", MaxResults: 2}); err != nil || len(res.Matches) != 2 || !res.Truncated {
		t.Errorf("max 2 = %v, %v", pathsOf(res.Matches), err)
	}
	e.fs.walkEntries = 5
	if res, err := e.fs.Find(t.Context(), apitypes.FindRequest{Pattern: "*"}); err != nil || !res.Truncated || len(res.Matches) > 5 {
		t.Errorf("entry budget 5 = %v truncated %v, %v", pathsOf(res.Matches), res.Truncated, err)
	}
	e.fs.walkEntries, e.fs.walkDepth = grepWalkEntries, 2
	if res, err := e.fs.Find(t.Context(), apitypes.FindRequest{Pattern: "*.go"}); err != nil || !res.Truncated || cmp.Diff([]string{"main.go", "src/a.go", "src/a_test.go", "src/canary.go -> ../outside/canary", "src/deep/b.go"}, pathsOf(res.Matches)) != "" {
		t.Errorf("depth 2 = %v truncated %v, %v", pathsOf(res.Matches), res.Truncated, err)
	}
	e.fs.walkDepth = grepWalkDepth
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res, err := e.fs.Find(ctx, apitypes.FindRequest{Pattern: "*"}); !errors.Is(err, context.Canceled) || len(res.Matches) != 0 {
		t.Errorf("Find after cancel = %v, %v", res, err)
	}
	// Bad requests.
	for _, req := range []apitypes.FindRequest{
		{Pattern: ""}, {Pattern: "/etc/*"}, {Pattern: "../*"}, {Pattern: "a/../b"}, {Pattern: "[unclosed"},
		{Pattern: "a\\b"}, {Pattern: "x\x00"}, {Pattern: strings.Repeat("*", 2000)},
		{Pattern: "**/**/**/**/**/x"}, {Pattern: "*", Type: "socket"}, {Pattern: "*", Path: "main.go"},
		{Pattern: "*", Path: "out"}, {Pattern: "*", Path: "../outside"},
	} {
		var err error
		within(t, safety, "Find", func() { _, err = e.fs.Find(t.Context(), req) })
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Find(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	e.checkOutside(t)
}

func TestTree(t *testing.T) {
	e := newEnv(t, noOwner)
	agentTree(t, e)
	one, err := e.fs.Tree(t.Context(), ".", 1)
	if err != nil {
		t.Fatal(err)
	}
	want1 := []string{".git/", "README.md", "docs/", "main.go", "out -> " + e.outside, "src/", "srclink -> src", "vendor/"}
	if diff := cmp.Diff(want1, pathsOf(one.Entries)); diff != "" || one.Truncated || one.Depth != 1 {
		t.Errorf("depth 1 (-want +got):\n%s", diff)
	}
	// The same as List.
	list, err := e.fs.List(t.Context(), ".")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(list, one.Entries, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Tree depth 1 differs from List (-list +tree):\n%s", diff)
	}
	two, err := e.fs.Tree(t.Context(), "src", 2)
	if err != nil {
		t.Fatal(err)
	}
	want2 := []string{"src/a.go", "src/a_test.go", "src/canary.go -> ../outside/canary", "src/deep/", "src/deep/b.go", "src/deep/er/"}
	if diff := cmp.Diff(want2, pathsOf(two.Entries)); diff != "" || two.Truncated {
		t.Errorf("src depth 2 (-want +got):\n%s", diff)
	}
	all, err := e.fs.Tree(t.Context(), ".", MaxTreeDepth)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pathsOf(all.Entries) {
		if strings.HasPrefix(p, ".git/") && p != ".git/" || strings.Contains(p, "canary ") || strings.HasPrefix(p, "out/") || strings.HasPrefix(p, "srclink/") {
			t.Errorf("deep listing has %s", p)
		}
	}
	small := newEnv(t, Options{UID: -1, GID: -1, MaxListEntries: 3})
	agentTree(t, small)
	cut, err := small.fs.Tree(t.Context(), ".", 5)
	if err != nil || !cut.Truncated || len(cut.Entries) > 3 {
		t.Errorf("over the entry budget = %v truncated %v, %v", pathsOf(cut.Entries), cut.Truncated, err)
	}
	for _, tc := range []struct {
		p     string
		depth int
	}{{".", 0}, {".", MaxTreeDepth + 1}, {"main.go", 2}, {"out", 2}, {"srclink", 2}, {"../outside", 2}} {
		if _, err := e.fs.Tree(t.Context(), tc.p, tc.depth); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Tree(%q, %d) = %v, want ErrInvalid", tc.p, tc.depth, err)
		}
	}
	e.checkOutside(t)
}
