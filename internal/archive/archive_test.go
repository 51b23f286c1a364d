package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// entry is one tar entry to write.
type entry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Uid: 0, Gid: 0}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// tree describes what lies under dir: path -> type, mode and content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		}
		got[rel] = desc
		return nil
	})
	return got
}

func TestExtract(t *testing.T) {
	dir := t.TempDir()
	st, err := Extract(t.Context(), tarOf(t,
		entry{name: "./", typ: tar.TypeDir, mode: 0o755},
		entry{name: "./README.md", body: "hi\n"},
		entry{name: "bin/run", body: "#!/bin/sh\n", mode: 0o4755}, // setuid dropped
		entry{name: "src/", typ: tar.TypeDir, mode: 0o1777},       // sticky and world-writable dropped
		entry{name: "src/a/b.go", body: "package a\n", mode: 0o600},
		entry{name: "src", typ: tar.TypeDir}, // named again: fine
		entry{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd"},
		entry{name: "rel", typ: tar.TypeSymlink, link: "../../outside"},
		entry{name: "empty", body: ""},
	), dir, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"README.md":  "-rw-r--r-- hi\n",
		"bin":        "drwxr-xr-x",
		"bin/run":    "-rwxr-xr-x #!/bin/sh\n",
		"src":        "drwxr-xr-x",
		"src/a":      "drwxr-xr-x",
		"src/a/b.go": "-rw-r--r-- package a\n",
		"link":       "Lrwxrwxrwx -> /etc/passwd",
		"rel":        "Lrwxrwxrwx -> ../../outside",
		"empty":      "-rw-r--r-- ",
	}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Stats{Files: 4, Dirs: 3, Symlinks: 2, Bytes: 23}, st); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// SECURITY.md C19: hostile archives are refused, and nothing outside the
// destination is touched.
func TestExtractHostile(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary\n"), 0o644)
	many := make([]entry, 0, 12)
	for i := range 12 {
		many = append(many, entry{name: "f" + strings.Repeat("x", i)})
	}
	tests := []struct {
		name    string
		archive *bytes.Buffer
		lim     Limits
		want    error
		msg     string
	}{
		{"dotdot", tarOf(t, entry{name: "../outside/new", body: "x"}), Limits{}, errdefs.ErrInvalid, `".."`},
		{"dotdot inside", tarOf(t, entry{name: "a/../../outside/new", body: "x"}), Limits{}, errdefs.ErrInvalid, `".."`},
		{"absolute", tarOf(t, entry{name: canary, body: "pwned"}), Limits{}, errdefs.ErrInvalid, "absolute"},
		{"link then file through it", tarOf(t, entry{name: "l", typ: tar.TypeSymlink, link: outside}, entry{name: "l/new", body: "pwned"}), Limits{}, errdefs.ErrInvalid, "made a symlink"},
		{"relative link then file", tarOf(t, entry{name: "l", typ: tar.TypeSymlink, link: "../outside"}, entry{name: "l/canary", body: "pwned"}), Limits{}, errdefs.ErrInvalid, "made a symlink"},
		{"link to itself then file", tarOf(t, entry{name: "d", typ: tar.TypeDir}, entry{name: "d/l", typ: tar.TypeSymlink, link: "."}, entry{name: "d/l/x", body: "x"}), Limits{}, errdefs.ErrInvalid, "made a symlink"},
		{"link then link replaced by file", tarOf(t, entry{name: "l", typ: tar.TypeSymlink, link: canary}, entry{name: "l", body: "pwned"}), Limits{}, errdefs.ErrInvalid, "twice"},
		{"file then file under it", tarOf(t, entry{name: "f", body: "x"}, entry{name: "f/g", body: "y"}), Limits{}, errdefs.ErrInvalid, "made a file"},
		{"dir then file of the same name", tarOf(t, entry{name: "d/x", body: "x"}, entry{name: "d", body: "y"}), Limits{}, errdefs.ErrInvalid, "twice"},
		{"hard link to a host file", tarOf(t, entry{name: "h", typ: tar.TypeLink, link: canary}), Limits{}, errdefs.ErrInvalid, "hard links"},
		{"hard link inside", tarOf(t, entry{name: "a", body: "x"}, entry{name: "h", typ: tar.TypeLink, link: "a"}), Limits{}, errdefs.ErrInvalid, "hard links"},
		{"char device", tarOf(t, entry{name: "null", typ: tar.TypeChar}), Limits{}, errdefs.ErrInvalid, "device"},
		{"block device", tarOf(t, entry{name: "sda", typ: tar.TypeBlock}), Limits{}, errdefs.ErrInvalid, "device"},
		{"fifo", tarOf(t, entry{name: "p", typ: tar.TypeFifo}), Limits{}, errdefs.ErrInvalid, "FIFO"},
		{".git", tarOf(t, entry{name: ".git/hooks/pre-commit", body: "x"}), Limits{}, errdefs.ErrInvalid, ".git"},
		{"nested .GIT", tarOf(t, entry{name: "sub/.GIT/config", body: "x"}), Limits{}, errdefs.ErrInvalid, ".git"},
		{"backslash", tarOf(t, entry{name: "..\\outside\\x", body: "x"}), Limits{}, errdefs.ErrInvalid, "backslash"},
		{"control byte", tarOf(t, entry{name: "a\nb", body: "x"}), Limits{}, errdefs.ErrInvalid, "control"},
		{"empty link target", tarOf(t, entry{name: "l", typ: tar.TypeSymlink}), Limits{}, errdefs.ErrInvalid, "empty target"},
		{"too many entries", tarOf(t, many...), Limits{MaxEntries: 10}, errdefs.ErrTooLarge, "more than 10 entries"},
		{"too many bytes", tarOf(t, entry{name: "a", body: "12345"}, entry{name: "b", body: "123456"}), Limits{MaxBytes: 10}, errdefs.ErrTooLarge, "over 10 bytes"},
		{"not a tar", bytes.NewBufferString(strings.Repeat("garbage!", 200)), Limits{}, errdefs.ErrInvalid, "reading the archive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dest")
			os.Mkdir(dir, 0o755)
			_, err := Extract(t.Context(), tt.archive, dir, tt.lim)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Extract = %v, want %v mentioning %q", err, tt.want, tt.msg)
			}
			if b, _ := os.ReadFile(canary); string(b) != "canary\n" {
				t.Fatalf("the canary changed: %q", b)
			}
			if es, _ := os.ReadDir(outside); len(es) != 1 {
				t.Fatalf("something was made outside: %v", es)
			}
			if err != nil && strings.Contains(err.Error(), dir) {
				t.Errorf("the error names the destination's host path: %v", err)
			}
		})
	}
	// A truncated archive.
	full := tarOf(t, entry{name: "big", body: strings.Repeat("x", 4096)})
	cut := bytes.NewBuffer(full.Bytes()[:1024])
	if _, err := Extract(t.Context(), cut, t.TempDir(), Limits{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("truncated archive = %v", err)
	}
	// A cancelled context stops it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Extract(ctx, tarOf(t, entry{name: "a", body: "x"}), t.TempDir(), Limits{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled = %v", err)
	}
}
