package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// entry is one member of a crafted archive.
type entry struct {
	name, link, body string
	typ              byte
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

// TestHostileArchivesStayInside extracts archives a hostile sandbox could
// send; each is refused with a clear error and nothing is written outside
// the destination.
func TestHostileArchivesStayInside(t *testing.T) {
	dir := entry{name: "d/", typ: tar.TypeDir}
	tests := []struct {
		name    string
		entries []entry
		errHas  string
	}{
		{"dot dot", []entry{dir, {name: "d/../../escape", typ: tar.TypeReg, body: "x"}}, "not a plain relative path"},
		{"dot dot at the top", []entry{{name: "../escape", typ: tar.TypeReg, body: "x"}}, "not under the copied path"},
		{"absolute", []entry{dir, {name: "/tmp/escape", typ: tar.TypeReg, body: "x"}}, "absolute"},
		{"other top", []entry{dir, {name: "e/x", typ: tar.TypeReg, body: "x"}}, "not under the copied path"},
		{"prefix trick", []entry{dir, {name: "dd/x", typ: tar.TypeReg, body: "x"}}, "not under the copied path"},
		{"absolute symlink", []entry{dir, {name: "d/l", link: "/etc", typ: tar.TypeSymlink}}, "points outside"},
		{"escaping symlink", []entry{dir, {name: "d/l", link: "../..", typ: tar.TypeSymlink}}, "points outside"},
		{"symlink to the parent", []entry{dir, {name: "d/l", link: "..", typ: tar.TypeSymlink}}, "points outside"},
		{"write through a symlink", []entry{dir, {name: "d/s/", typ: tar.TypeDir}, {name: "d/l", link: "s", typ: tar.TypeSymlink},
			{name: "d/l/x", typ: tar.TypeReg, body: "x"}}, "beyond the symlink"},
		{"chained symlinks", []entry{dir, {name: "d/a/b/", typ: tar.TypeDir}, {name: "d/a/b/up", link: "..", typ: tar.TypeSymlink},
			{name: "d/a/b/up/x", link: "../..", typ: tar.TypeSymlink}}, "beyond the symlink"},
		{"hard link out", []entry{dir, {name: "d/h", link: "/etc/passwd", typ: tar.TypeLink}}, "hard link"},
		{"hard link to a non-file", []entry{dir, {name: "d/h", link: "d/", typ: tar.TypeLink}}, "hard link"},
		{"char device", []entry{dir, {name: "d/null", typ: tar.TypeChar}}, "devices"},
		{"fifo", []entry{dir, {name: "d/fifo", typ: tar.TypeFifo}}, "devices"},
		{"backslash", []entry{dir, {name: `d/..\..\x`, typ: tar.TypeReg, body: "x"}}, "not a plain relative path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "inside", "out")
			os.Mkdir(filepath.Dir(dst), 0o755)
			sink, err := openLocalSink(dst, "d", true)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.root.Close()
			err = sink.fromTar(archive(t, tt.entries...), "d")
			if err == nil || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("err = %v, want one containing %q", err, tt.errHas)
			}
			entries, _ := os.ReadDir(parent)
			if len(entries) != 1 || entries[0].Name() != "inside" {
				t.Errorf("written next to the destination: %v", entries)
			}
			filepath.WalkDir(parent, func(p string, d os.DirEntry, err error) error {
				if d != nil && d.Type()&os.ModeSymlink != 0 {
					target, _ := os.Readlink(p)
					if resolved := filepath.Join(filepath.Dir(p), target); !strings.HasPrefix(resolved, dst+"/") {
						t.Errorf("link out written: %s -> %s", p, target)
					}
				}
				return nil
			})
		})
	}
}

func TestArchiveExtractsAsNamed(t *testing.T) {
	parent := t.TempDir()
	sink, err := openLocalSink(filepath.Join(parent, "copy"), "d", true)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.root.Close()
	err = sink.fromTar(archive(t,
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "d/sub/", typ: tar.TypeDir},
		entry{name: "d/sub/f", typ: tar.TypeReg, body: "content"},
		entry{name: "d/sub/l", link: "f", typ: tar.TypeSymlink},
		entry{name: "d/up", link: "sub/../sub/f", typ: tar.TypeSymlink},
		entry{name: "d/h", link: "d/sub/f", typ: tar.TypeLink},
	), "d")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"copy/sub/f": "content", "copy/sub/l": "content", "copy/up": "content", "copy/h": "content"} {
		if b, err := os.ReadFile(filepath.Join(parent, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", name, b, err)
		}
	}
	if sink.stats.Files != 2 || sink.stats.Dirs != 2 || sink.stats.Symlinks != 2 {
		t.Errorf("stats = %+v", sink.stats)
	}
}

func TestParseCpArg(t *testing.T) {
	for in, want := range map[string]string{
		"ws_aaaaaaaaaaaa:/tmp/x":   "ws_aaaaaaaaaaaa:/tmp/x",
		"ws_aaaaaaaaaaaa:rel/../p": "ws_aaaaaaaaaaaa:/workspace/p",
		"sb_aaaaaaaaaaaa:":         "sb_aaaaaaaaaaaa:/workspace",
		// A trailing slash is kept: it asks for a directory.
		"ws_aaaaaaaaaaaa:dir/":     "ws_aaaaaaaaaaaa:/workspace/dir/",
		"ws_aaaaaaaaaaaa:/tmp/d//": "ws_aaaaaaaaaaaa:/tmp/d/",
		"sb_aaaaaaaaaaaa:./":       "sb_aaaaaaaaaaaa:/workspace/",
		"sb_aaaaaaaaaaaa:/":        "sb_aaaaaaaaaaaa:/",
		"ws_aaaaaaaaaaaa:dir/.":    "ws_aaaaaaaaaaaa:/workspace/dir",
		"./ws_aaaaaaaaaaaa:x":      "",
		"host:path":                "",
		"/abs/path":                "",
	} {
		r, ok := parseCpArg(in)
		got := ""
		if ok {
			got = r.String()
		}
		if got != want {
			t.Errorf("parseCpArg(%q) = %q, want %q", in, got, want)
		}
	}
}
