package fileapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// noOwner leaves ownership alone, so tests that do not check it do not
// depend on running as root.
var noOwner = Options{UID: -1, GID: -1}

// ignoreTime drops ModTime, which tests cannot predict.
var ignoreTime = cmpopts.IgnoreFields(Info{}, "ModTime")

func TestWriteThenRead(t *testing.T) {
	e := newEnv(t, noOwner)
	ctx := t.Context()
	tests := []struct {
		name    string
		path    string
		content string
		mode    fs.FileMode
		want    Info
	}{
		{"plain", "a.txt", "hello\n", 0, Info{Path: "a.txt", Name: "a.txt", Type: TypeFile, Size: 6, Mode: "0644"}},
		{"mode", "secret", "s", 0o600, Info{Path: "secret", Name: "secret", Type: TypeFile, Size: 1, Mode: "0600"}},
		{"exec", "run.sh", "#!/bin/sh\n", 0o755, Info{Path: "run.sh", Name: "run.sh", Type: TypeFile, Size: 10, Mode: "0755"}},
		{"empty", "empty", "", 0, Info{Path: "empty", Name: "empty", Type: TypeFile, Mode: "0644"}},
		{"unclean path", "./b//c.txt", "x", 0, Info{Path: "b/c.txt", Name: "c.txt", Type: TypeFile, Size: 1, Mode: "0644"}},
		{"literal percent", "%2e%2e", "x", 0, Info{Path: "%2e%2e", Name: "%2e%2e", Type: TypeFile, Size: 1, Mode: "0644"}},
	}
	if err := os.Mkdir(e.path("b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.fs.Write(ctx, tt.path, strings.NewReader(tt.content), tt.mode, false)
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, ignoreTime); diff != "" {
				t.Errorf("Write info (-want +got):\n%s", diff)
			}
			var buf bytes.Buffer
			got, err = e.fs.Read(ctx, tt.path, &buf)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, ignoreTime); diff != "" {
				t.Errorf("Read info (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.content, buf.String()); diff != "" {
				t.Errorf("Read content (-want +got):\n%s", diff)
			}
			// Visible to anyone opening the path afresh, with the mode.
			b, err := os.ReadFile(e.path(tt.want.Path))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.content, string(b)); diff != "" {
				t.Errorf("os.ReadFile (-want +got):\n%s", diff)
			}
			fi, err := os.Lstat(e.path(tt.want.Path))
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%04o", uint32(fi.Mode().Perm())); got != tt.want.Mode {
				t.Errorf("mode on disk = %s, want %s", got, tt.want.Mode)
			}
		})
	}
	assertNoTemp(t, e)
}

func TestWriteOverwrite(t *testing.T) {
	e := newEnv(t, noOwner)
	ctx := t.Context()
	e.writeFile(t, "f", "old content that is longer")
	if err := os.Chmod(e.path("f"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Mode 0 keeps the existing permissions.
	if _, err := e.fs.Write(ctx, "f", strings.NewReader("new"), 0, false); err != nil {
		t.Fatal(err)
	}
	assertFile(t, e.path("f"), "new", 0o640)
	// An explicit mode replaces them.
	if _, err := e.fs.Write(ctx, "f", strings.NewReader("newer"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	assertFile(t, e.path("f"), "newer", 0o600)
	assertNoTemp(t, e)
}

func TestWriteParents(t *testing.T) {
	e := newEnv(t, noOwner)
	ctx := t.Context()
	_, err := e.fs.Write(ctx, "x/y/z.txt", strings.NewReader("z"), 0, false)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Write without parents = %v, want ErrNotFound", err)
	}
	if _, err := os.Lstat(e.path("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Write without parents created x: %v", err)
	}
	if _, err := e.fs.Write(ctx, "x/y/z.txt", strings.NewReader("z"), 0, true); err != nil {
		t.Fatal(err)
	}
	assertFile(t, e.path("x/y/z.txt"), "z", 0o644)
	fi, err := os.Stat(e.path("x/y"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("x/y = %v, %v; want a 0755 directory", fi, err)
	}
	// A file in the way of a parent is refused, not replaced.
	e.writeFile(t, "file", "f")
	_, err = e.fs.Write(ctx, "file/sub/z", strings.NewReader("z"), 0, true)
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Write through a file = %v, want ErrInvalid", err)
	}
	assertFile(t, e.path("file"), "f", 0o644)
}

func TestWriteOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "chown needs root; CI runs this package as root")
	}
	e := newEnv(t, Options{UID: 1000, GID: 1001})
	ctx := t.Context()
	if err := os.Mkdir(e.path("existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Write(ctx, "existing/new/deeper/f.txt", strings.NewReader("x"), 0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Mkdir(ctx, "made", false); err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint32{
		".":                         {0, 0},
		"existing":                  {0, 0}, // not created by us: untouched
		"existing/new":              {1000, 1001},
		"existing/new/deeper":       {1000, 1001},
		"existing/new/deeper/f.txt": {1000, 1001},
		"made":                      {1000, 1001},
	}
	got := map[string][2]uint32{}
	for p := range want {
		fi, err := os.Lstat(e.path(p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		got[p] = [2]uint32{st.Uid, st.Gid}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
}

func TestWriteRefusals(t *testing.T) {
	e := newEnv(t, Options{UID: -1, GID: -1, MaxWriteBytes: 10})
	e.writeFile(t, "keep", "original")
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Links a sandbox planted, which a path ending in a slash must not
	// replace.
	if err := os.Symlink("dir", e.path("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", e.path("out")); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		path string
		body io.Reader
		mode fs.FileMode
		want error
	}{
		{"over the limit", t.Context(), "keep", strings.NewReader("12345678901"), 0, errdefs.ErrTooLarge},
		{"at the limit is fine", t.Context(), "ten", strings.NewReader("1234567890"), 0, nil},
		{"directory target", t.Context(), "dir", strings.NewReader("x"), 0, errdefs.ErrConflict},
		{"root", t.Context(), ".", strings.NewReader("x"), 0, errdefs.ErrConflict},
		{"trailing slash on a link", t.Context(), "link/", strings.NewReader("x"), 0, errdefs.ErrInvalid},
		{"trailing slash on a link out", t.Context(), "out/", strings.NewReader("x"), 0, errdefs.ErrInvalid},
		{"trailing slash on a file", t.Context(), "keep/", strings.NewReader("x"), 0, errdefs.ErrInvalid},
		{"trailing slash on nothing", t.Context(), "new/", strings.NewReader("x"), 0, errdefs.ErrInvalid},
		{"setuid mode", t.Context(), "suid", strings.NewReader("x"), 0o755 | fs.ModeSetuid, errdefs.ErrInvalid},
		{"canceled", canceled, "keep", strings.NewReader("x"), 0, context.Canceled},
		{"reader fails", t.Context(), "keep", iotest.TimeoutReader(strings.NewReader("abc")), 0, iotest.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.fs.Write(tt.ctx, tt.path, tt.body, tt.mode, false)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Write = %v", err)
				}
			} else if !errors.Is(err, tt.want) {
				t.Fatalf("Write = %v, want %v", err, tt.want)
			}
			assertFile(t, e.path("keep"), "original", 0o644)
			assertNoTemp(t, e)
		})
	}
	if fi, err := os.Lstat(e.path("dir")); err != nil || !fi.IsDir() {
		t.Errorf("dir was replaced: %v, %v", fi, err)
	}
	for name, target := range map[string]string{"link": "dir", "out": "/etc"} {
		if got, err := os.Readlink(e.path(name)); err != nil || got != target {
			t.Errorf("the link %s became %q, %v", name, got, err)
		}
	}
	if _, err := os.Lstat(e.path("new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a write to new/ made new: %v", err)
	}
	if entries, _ := os.ReadDir(e.path("dir")); len(entries) != 0 {
		t.Errorf("a write through link/ landed in dir: %v", entries)
	}
}

func TestRead(t *testing.T) {
	e := newEnv(t, Options{UID: -1, GID: -1, MaxReadBytes: 10})
	e.writeFile(t, "small", "0123456789")
	e.writeFile(t, "big", "0123456789a")
	e.writeFile(t, "dir/f", "x")
	e.symlink(t, "small", "link")
	e.symlink(t, "dir/f", "dirlink")
	tests := []struct {
		name    string
		path    string
		want    string
		wantErr error
	}{
		{"at limit", "small", "0123456789", nil},
		{"symlink inside", "link", "0123456789", nil},
		{"nested symlink inside", "dirlink", "x", nil},
		{"over limit", "big", "", errdefs.ErrTooLarge},
		{"directory", "dir", "", errdefs.ErrInvalid},
		{"root", ".", "", errdefs.ErrInvalid},
		{"missing", "nope", "", errdefs.ErrNotFound},
		{"missing parent", "nope/x", "", errdefs.ErrNotFound},
		{"file as directory", "small/x", "", errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			_, err := e.fs.Read(t.Context(), tt.path, &buf)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Read(%q) = %v, want %v", tt.path, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not name the path %q", err, tt.path)
			}
			if diff := cmp.Diff(tt.want, buf.String()); diff != "" {
				t.Errorf("content (-want +got):\n%s", diff)
			}
		})
	}
}

// growingWriter appends to the file being read while Read copies it, the
// way a sandbox could grow a file past the cap after the size check.
type growingWriter struct {
	buf  bytes.Buffer // not embedded: its ReadFrom would bypass Write
	path string
}

func (w *growingWriter) Write(p []byte) (int, error) {
	if w.buf.Len() == 0 {
		f, err := os.OpenFile(w.path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		f.WriteString(strings.Repeat("grown", 100))
		f.Close()
	}
	return w.buf.Write(p)
}

func TestReadStopsAtCapWhenFileGrows(t *testing.T) {
	e := newEnv(t, Options{UID: -1, GID: -1, MaxReadBytes: 10})
	e.writeFile(t, "f", "0123")
	w := &growingWriter{path: e.path("f")}
	_, err := e.fs.Read(t.Context(), "f", w)
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("Read = %v, want ErrTooLarge", err)
	}
	if w.buf.Len() > 10 {
		t.Errorf("Read wrote %d bytes, past the 10-byte cap", w.buf.Len())
	}
}

func TestStat(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "d/f", "abc")
	e.symlink(t, "f", "d/l")
	if err := os.Chmod(e.path("d"), fs.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		want    Info
		wantErr error
	}{
		{".", Info{Path: ".", Name: ".", Type: TypeDir, Mode: "0755"}, nil},
		{"d", Info{Path: "d", Name: "d", Type: TypeDir, Mode: "1777"}, nil},
		{"d/f", Info{Path: "d/f", Name: "f", Type: TypeFile, Size: 3, Mode: "0644"}, nil},
		{"d/l", Info{Path: "d/l", Name: "l", Type: TypeSymlink, Size: 1, Mode: "0777", LinkTarget: "f"}, nil},
		{"d/missing", Info{}, errdefs.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := e.fs.Stat(t.Context(), tt.path)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Stat = %v, want %v", err, tt.wantErr)
			}
			// Directory sizes depend on the filesystem.
			if got.Type == TypeDir {
				got.Size = 0
			}
			if diff := cmp.Diff(tt.want, got, ignoreTime); diff != "" {
				t.Errorf("Stat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, noOwner)
	for _, n := range []string{"b", "a", "C", "_z"} {
		e.writeFile(t, "dir/"+n, n)
	}
	if err := os.Mkdir(e.path("dir/sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	e.symlink(t, "a", "dir/link")
	got, err := e.fs.List(t.Context(), "dir")
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Type == TypeDir {
			got[i].Size = 0
		}
	}
	want := []Info{
		{Path: "dir/C", Name: "C", Type: TypeFile, Size: 1, Mode: "0644"},
		{Path: "dir/_z", Name: "_z", Type: TypeFile, Size: 2, Mode: "0644"},
		{Path: "dir/a", Name: "a", Type: TypeFile, Size: 1, Mode: "0644"},
		{Path: "dir/b", Name: "b", Type: TypeFile, Size: 1, Mode: "0644"},
		{Path: "dir/link", Name: "link", Type: TypeSymlink, Size: 1, Mode: "0777", LinkTarget: "a"},
		{Path: "dir/sub", Name: "sub", Type: TypeDir, Mode: "0700"},
	}
	if diff := cmp.Diff(want, got, ignoreTime); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	root, err := e.fs.List(t.Context(), ".")
	if err != nil || len(root) != 1 || root[0].Path != "dir" {
		t.Errorf("List(.) = %v, %v; want [dir]", root, err)
	}
	if _, err := e.fs.List(t.Context(), "dir/a"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("List(file) = %v, want ErrInvalid", err)
	}
	if _, err := e.fs.List(t.Context(), "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("List(missing) = %v, want ErrNotFound", err)
	}
}

func TestListCap(t *testing.T) {
	e := newEnv(t, Options{UID: -1, GID: -1, MaxListEntries: 3})
	for i := range 5 {
		e.writeFile(t, fmt.Sprintf("d/%d", i), "")
	}
	e.writeFile(t, "ok/1", "")
	e.writeFile(t, "ok/2", "")
	e.writeFile(t, "ok/3", "")
	got, err := e.fs.List(t.Context(), "d")
	if !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("List = %v, want ErrTooLarge", err)
	}
	if len(got) != 3 {
		t.Errorf("List returned %d entries, want the cap of 3", len(got))
	}
	if got, err := e.fs.List(t.Context(), "ok"); err != nil || len(got) != 3 {
		t.Errorf("List at exactly the cap = %d entries, %v", len(got), err)
	}
}

func TestMkdir(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "file", "x")
	tests := []struct {
		path    string
		parents bool
		wantErr error
	}{
		{"a", false, nil},
		{"a", false, errdefs.ErrConflict},
		{"a", true, nil},
		{".", false, errdefs.ErrConflict},
		{".", true, nil},
		{"b/c/d", false, errdefs.ErrNotFound},
		{"b/c/d", true, nil},
		{"file", false, errdefs.ErrConflict},
		{"file", true, errdefs.ErrConflict},
		{"file/x", true, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s parents=%v", tt.path, tt.parents), func(t *testing.T) {
			got, err := e.fs.Mkdir(t.Context(), tt.path, tt.parents)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Mkdir = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.Type != TypeDir || got.Path != tt.path || got.Mode != "0755" {
				t.Errorf("Mkdir info = %+v", got)
			}
			if fi, err := os.Stat(e.path(tt.path)); err != nil || !fi.IsDir() {
				t.Errorf("%s is not a directory on disk: %v", tt.path, err)
			}
		})
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "f", "x")
	e.writeFile(t, "full/a/b", "x")
	e.writeFile(t, "full2/a/b", "x")
	e.writeFile(t, "target", "x")
	e.symlink(t, "target", "link")
	if err := os.Mkdir(e.path("empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path      string
		recursive bool
		wantErr   error
	}{
		{"f", false, nil},
		{"f", false, errdefs.ErrNotFound},
		{"f", true, errdefs.ErrNotFound},
		{"empty", false, nil},
		{"full", false, errdefs.ErrConflict},
		{"full", true, nil},
		{"full2/a", true, nil},
		{"link", false, nil},
		{".", true, errdefs.ErrInvalid},
		{"./", false, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s recursive=%v", tt.path, tt.recursive), func(t *testing.T) {
			err := e.fs.Remove(t.Context(), tt.path, tt.recursive)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Remove = %v, want %v", err, tt.wantErr)
			}
			_, statErr := os.Lstat(e.path(tt.path))
			if gone := errors.Is(statErr, fs.ErrNotExist); gone != (err == nil || tt.wantErr == errdefs.ErrNotFound) {
				t.Errorf("after Remove = %v, lstat = %v", err, statErr)
			}
		})
	}
	assertFile(t, e.path("target"), "x", 0o644) // removing the link kept its target
	if _, err := os.Lstat(e.path("full2")); err != nil {
		t.Errorf("removing full2/a removed its parent: %v", err)
	}
}

func TestRename(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "a", "A")
	e.writeFile(t, "b", "B")
	e.writeFile(t, "dir/x", "X")
	e.symlink(t, "b", "link")
	tests := []struct {
		name     string
		from, to string
		wantErr  error
	}{
		{"move", "a", "moved", nil},
		{"into dir", "moved", "dir/moved", nil},
		{"replace file", "dir/moved", "b", nil},
		{"move symlink itself", "link", "dir/link", nil},
		{"missing", "nope", "x", errdefs.ErrNotFound},
		{"onto directory", "b", "dir", errdefs.ErrConflict},
		{"into itself", "dir", "dir/sub", errdefs.ErrInvalid},
		{"root from", ".", "x", errdefs.ErrInvalid},
		{"root to", "b", ".", errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.fs.Rename(t.Context(), tt.from, tt.to)
			if !errors.Is(err, tt.wantErr) || (err != nil) != (tt.wantErr != nil) {
				t.Fatalf("Rename(%q, %q) = %v, want %v", tt.from, tt.to, err, tt.wantErr)
			}
		})
	}
	assertFile(t, e.path("b"), "A", 0o644)
	if target, err := os.Readlink(e.path("dir/link")); err != nil || target != "b" {
		t.Errorf("moved link = %q, %v; want a link to b", target, err)
	}
}

func TestGrep(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "a.go", "package a\nfunc Foo() {}\n// foo again\r\n")
	e.writeFile(t, "sub/b.txt", "nothing\nFOO bar\n")
	e.writeFile(t, "sub/deeper/c.txt", "foo\n")
	e.writeFile(t, ".git/config", "foo in git\n")
	e.writeFile(t, "bin.dat", "foo\x00binary\n")
	e.writeFile(t, "huge.txt", "foo\n"+strings.Repeat("x", 2000))
	e.writeFile(t, "long.txt", "foo"+strings.Repeat("é", 400)+"\n")
	tests := []struct {
		name string
		req  GrepRequest
		want GrepResult
	}{
		{
			name: "case sensitive",
			req:  GrepRequest{Pattern: "foo", MaxFileBytes: 1000},
			want: GrepResult{
				Matches: []GrepMatch{
					{Path: "a.go", Line: 3, Text: "// foo again"},
					{Path: "long.txt", Line: 1, Text: "foo" + strings.Repeat("é", 254)},
					{Path: "sub/deeper/c.txt", Line: 1, Text: "foo"},
				},
				FilesScanned: 4,
			},
		},
		{
			name: "ignore case",
			req:  GrepRequest{Pattern: "foo", IgnoreCase: true, MaxFileBytes: 1000},
			want: GrepResult{
				Matches: []GrepMatch{
					{Path: "a.go", Line: 2, Text: "func Foo() {}"},
					{Path: "a.go", Line: 3, Text: "// foo again"},
					{Path: "long.txt", Line: 1, Text: "foo" + strings.Repeat("é", 254)},
					{Path: "sub/b.txt", Line: 2, Text: "FOO bar"},
					{Path: "sub/deeper/c.txt", Line: 1, Text: "foo"},
				},
				FilesScanned: 4,
			},
		},
		{
			name: "max matches",
			req:  GrepRequest{Pattern: "(?i)foo", MaxMatches: 2, MaxFileBytes: 1000},
			want: GrepResult{
				Matches: []GrepMatch{
					{Path: "a.go", Line: 2, Text: "func Foo() {}"},
					{Path: "a.go", Line: 3, Text: "// foo again"},
				},
				FilesScanned: 2,
				Truncated:    true,
			},
		},
		{
			name: "subtree",
			req:  GrepRequest{Pattern: "foo", Path: "sub", IgnoreCase: true},
			want: GrepResult{
				Matches: []GrepMatch{
					{Path: "sub/b.txt", Line: 2, Text: "FOO bar"},
					{Path: "sub/deeper/c.txt", Line: 1, Text: "foo"},
				},
				FilesScanned: 2,
			},
		},
		{
			name: "single file",
			req:  GrepRequest{Pattern: "FOO", Path: "sub/b.txt"},
			want: GrepResult{Matches: []GrepMatch{{Path: "sub/b.txt", Line: 2, Text: "FOO bar"}}, FilesScanned: 1},
		},
		{
			name: "include git and big files",
			req:  GrepRequest{Pattern: "^foo", Path: ".", IncludeGit: true},
			want: GrepResult{
				Matches: []GrepMatch{
					{Path: ".git/config", Line: 1, Text: "foo in git"},
					{Path: "huge.txt", Line: 1, Text: "foo"},
					{Path: "long.txt", Line: 1, Text: "foo" + strings.Repeat("é", 254)},
					{Path: "sub/deeper/c.txt", Line: 1, Text: "foo"},
				},
				FilesScanned: 6,
			},
		},
		{
			name: "no match",
			req:  GrepRequest{Pattern: "zzz"},
			want: GrepResult{Matches: []GrepMatch{}, FilesScanned: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.fs.Grep(t.Context(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Grep (-want +got):\n%s", diff)
			}
		})
	}

	for _, tt := range []struct {
		name string
		req  GrepRequest
		want error
	}{
		{"bad pattern", GrepRequest{Pattern: "("}, errdefs.ErrInvalid},
		{"huge pattern", GrepRequest{Pattern: strings.Repeat("a", 5000)}, errdefs.ErrInvalid},
		{"missing path", GrepRequest{Pattern: "a", Path: "nope"}, errdefs.ErrNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := e.fs.Grep(t.Context(), tt.req); !errors.Is(err, tt.want) {
				t.Errorf("Grep = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestGrepWalkBudget(t *testing.T) {
	e := newEnv(t, noOwner)
	for i := range 20 {
		e.writeFile(t, fmt.Sprintf("d%02d/f", i), "hit\n")
	}
	e.fs.walkEntries = 10
	got, err := e.fs.Grep(t.Context(), GrepRequest{Pattern: "hit"})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Truncated || got.FilesScanned >= 20 {
		t.Errorf("Grep over budget = %d files, truncated=%v; want fewer than 20 and truncated", got.FilesScanned, got.Truncated)
	}
}

func TestGrepCanceled(t *testing.T) {
	e := newEnv(t, noOwner)
	e.writeFile(t, "f", "hit\n")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.fs.Grep(ctx, GrepRequest{Pattern: "hit"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Grep with canceled ctx = %v, want context.Canceled", err)
	}
}

// TestEscapeErrorText pins the text of os.Root's unexported escape error,
// which isEscape matches on: if a Go release rewords it, escapes would stop
// being classified as ErrInvalid, and this test says why.
func TestEscapeErrorText(t *testing.T) {
	r, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Open("../x")
	if !isEscape(err) {
		t.Fatalf("os.Root escape error %q is not recognised by isEscape", err)
	}
	if got := classify("reading", "../x", err); !errors.Is(got, errdefs.ErrInvalid) {
		t.Errorf("classify(escape) = %v, want ErrInvalid", got)
	}
}

func assertFile(t *testing.T, p, content string, perm fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want a regular file %v", p, fi.Mode(), perm)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(content, string(b)); diff != "" {
		t.Errorf("%s content (-want +got):\n%s", p, diff)
	}
}

// assertNoTemp fails if a Write left a temporary file anywhere.
func assertNoTemp(t *testing.T, e *env) {
	t.Helper()
	filepath.WalkDir(e.base, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}
