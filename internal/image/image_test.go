package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestWithDefaults(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		got, err := BuildOptions{Kind: KindBusybox, RootfsDir: "/data/images/busybox/rootfs"}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		want := BuildOptions{
			Kind: KindBusybox, Name: "agentbox/busybox:latest",
			RootfsDir: "/data/images/busybox/rootfs", CacheDir: "/data/images/busybox/cache",
			UID: 1000, GID: 1000,
		}
		got.Progress = nil
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	})
	t.Run("names", func(t *testing.T) {
		for in, want := range map[string]string{
			"":                          "agentbox/debian:bookworm",
			"mine":                      "mine:latest",
			"docker.io/library/foo:1.2": "foo:1.2",
			"registry.local:5000/a/b":   "registry.local:5000/a/b:latest",
		} {
			got, err := BuildOptions{Kind: KindDebian, Name: in, Mirror: "http://m.invalid/debian"}.withDefaults()
			if err != nil {
				t.Errorf("%q: %v", in, err)
				continue
			}
			if got.Name != want {
				t.Errorf("%q: name %q, want %q", in, got.Name, want)
			}
		}
	})
	for _, tc := range []struct {
		name string
		opts BuildOptions
		want string
	}{
		{"no kind", BuildOptions{}, "no kind given"},
		{"unknown kind", BuildOptions{Kind: "alpine"}, `unknown kind "alpine"`},
		{"bad name", BuildOptions{Kind: KindBusybox, Name: "Not A Name"}, `image name "Not A Name"`},
		{"digest name", BuildOptions{Kind: KindBusybox, Name: "x@sha256:" + strings.Repeat("a", 64)}, "cannot be named by digest"},
		{"negative uid", BuildOptions{Kind: KindBusybox, UID: -1}, "uid -1 out of range"},
		{"huge gid", BuildOptions{Kind: KindBusybox, GID: 1 << 32}, "gid 4294967296 out of range"},
		{"nobody", BuildOptions{Kind: KindBusybox, UID: 65534}, "uid 65534 is nobody's"},
		{"root dir", BuildOptions{Kind: KindBusybox, RootfsDir: "/"}, "rootfs dir cannot be /"},
		{"nothing to do", BuildOptions{Kind: KindBusybox, NoEngine: true}, "nothing to build"},
		{"ftp mirror", BuildOptions{Kind: KindDebian, Mirror: "ftp://ftp.debian.org/debian"}, "want an http, https or file URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.withDefaults()
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestDetectMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"nothing", nil, ""},
		{"deb822 as on Debian 12", map[string]string{"sources.list.d/debian.sources": `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`}, "http://deb.debian.org/debian"},
		{"one-line with options", map[string]string{"sources.list": `# a comment
deb-src http://src.invalid/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://mirror.local/debian/ bookworm main contrib
`}, "http://mirror.local/debian"},
		{"security archive only", map[string]string{"sources.list": "deb http://security.debian.org/debian-security bookworm-security main\n"}, ""},
		{"ubuntu", map[string]string{"sources.list": "deb http://archive.ubuntu.com/ubuntu jammy main\n"}, ""},
		{"other suite falls back", map[string]string{"sources.list": "deb https://mirror.example/debian trixie main\n"}, "https://mirror.example/debian"},
		{"exact suite wins over fallback", map[string]string{
			"sources.list":                   "deb http://a.invalid/debian trixie main\n",
			"sources.list.d/b.list":          "deb http://b.invalid/debian bookworm main\n",
			"sources.list.d/c.list.disabled": "deb http://c.invalid/debian bookworm main\n",
		}, "http://b.invalid/debian"},
		{"disabled stanza and third-party repos", map[string]string{
			"sources.list.d/a.sources": "Types: deb\nURIs: http://off.invalid/debian\nSuites: bookworm\nEnabled: no\n\nTypes: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n",
			"sources.list.d/b.sources": "Types: deb deb-src\nURIs:\n http://on.invalid/debian\nSuites: bookworm\nComponents: main\n",
		}, "http://on.invalid/debian"},
		{"mirror method is not for debootstrap", map[string]string{"sources.list": "deb mirror+file:/etc/apt/mirrors.txt bookworm main\n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
			for name, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := detectMirror(dir, "bookworm"); got != tc.want {
				t.Errorf("mirror %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRecipeHash(t *testing.T) {
	a := recipe{Version: recipeVersion, Kind: KindDebian, UID: 1000, GID: 1000, Debian: newDebootstrapRecipe(nil)}
	b := a
	if a.Hash() != b.Hash() || len(a.Hash()) != 64 {
		t.Fatalf("hash not stable: %s %s", a.Hash(), b.Hash())
	}
	b.UID = 1001
	if a.Hash() == b.Hash() {
		t.Error("uid does not change the recipe")
	}
	d := newDebootstrapRecipe(nil)
	if d.cacheKey("http://a/debian", "amd64") == d.cacheKey("http://b/debian", "amd64") {
		t.Error("the mirror does not change the cache key")
	}
	if !strings.Contains(a.release(), "RECIPE="+a.Hash()+"\n") {
		t.Errorf("release %q lacks the recipe", a.release())
	}
}

func TestImportChanges(t *testing.T) {
	o := BuildOptions{Kind: KindBusybox, UID: 1000, GID: 1001}
	got := importChanges(o, recipe{Kind: KindBusybox})
	want := []string{
		"ENV PATH=" + pathEnv,
		"WORKDIR /workspace",
		`CMD ["/bin/sh"]`,
		`LABEL agentbox.image.gid="1001" agentbox.image.kind="busybox" agentbox.image.recipe="` + recipe{Kind: KindBusybox}.Hash() + `" agentbox.image.uid="1000"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if q := dockerfileQuote(`a"b\c`); q != `"a\"b\\c"` {
		t.Errorf("quote %s", q)
	}
}

func TestTail(t *testing.T) {
	tl := newTail(2)
	tl.Write([]byte("one\ntwo\nthr"))
	tl.Write([]byte("ee\nfour"))
	if got := tl.String(); got != "three\nfour" {
		t.Errorf("tail %q", got)
	}
	if got := humanBytes(412_300_000); got != "412.3 MB" {
		t.Errorf("humanBytes %q", got)
	}
}
