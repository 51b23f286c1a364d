package image

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/image/imagetest"
)

func TestParsePathRef(t *testing.T) {
	dir := t.TempDir()
	colon := filepath.Join(dir, "a:b.tar")
	os.WriteFile(colon, nil, 0o644)
	for _, tc := range []struct {
		in   string
		want PathRef
		err  string
	}{
		{in: "oci:/srv/layout", want: PathRef{TransportOCI, "/srv/layout", ""}},
		{in: "oci:/srv/layout:v1", want: PathRef{TransportOCI, "/srv/layout", "v1"}},
		{in: "oci-archive:/srv/x.tar:v1", want: PathRef{TransportOCIArchive, "/srv/x.tar", "v1"}},
		{in: "docker-archive:/srv/x.tar", want: PathRef{TransportDockerArchive, "/srv/x.tar", ""}},
		{in: "docker-archive:/srv/x.tar:app:1", want: PathRef{TransportDockerArchive, "/srv/x.tar", "app:1"}},
		{in: "oci-archive:" + colon, want: PathRef{TransportOCIArchive, colon, ""}},
		{in: "oci:relative/dir", err: "not absolute"},
		{in: "oci:/srv/x:a:b", err: "holds a colon"},
		{in: "oci:/srv/x:", err: "empty tag"},
		{in: "busybox:latest", err: "not an image path"},
	} {
		got, err := ParsePathRef(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

// busyboxID is the engine id of agentbox/busybox:latest, built if missing.
func busyboxID(t *testing.T) string {
	t.Helper()
	requireEngine(t)
	name := DefaultName(KindBusybox)
	if imageID(t, name) == "" {
		if _, err := Build(t.Context(), BuildOptions{Kind: KindBusybox}); err != nil {
			t.Fatal(err)
		}
	}
	return imageID(t, name)
}

// TestPathImages unpacks the busybox image from a `docker save` archive, an
// OCI layout made from it and an OCI archive of that layout, and loads
// images the engine does not have from a layout and from an archive.
func TestPathImages(t *testing.T) {
	id := busyboxID(t)
	dir := t.TempDir()
	saved := imagetest.DockerSave(t, DefaultName(KindBusybox), dir)
	layout := filepath.Join(dir, "layout")
	if got := imagetest.LayoutFromDockerArchive(t, saved, layout, "v1"); got != id {
		t.Fatalf("layout image id %s, engine's %s", got, id)
	}
	archive := filepath.Join(dir, "oci.tar")
	imagetest.TarDir(t, layout, archive)

	for _, ref := range []string{"docker-archive:" + saved, "oci:" + layout + ":v1", "oci:" + layout, "oci-archive:" + archive + ":v1"} {
		t.Run(strings.SplitN(ref, ":", 2)[0], func(t *testing.T) {
			cache := t.TempDir()
			u, err := UnpackPath(t.Context(), ref, cache)
			if err != nil {
				t.Fatal(err)
			}
			if u.ID != id || u.Source != ref || u.Rootfs != filepath.Join(cache, strings.TrimPrefix(id, "sha256:"), "rootfs") {
				t.Errorf("unpacked %+v", u)
			}
			if !slices.Contains(u.Config.Env, "PATH="+pathEnv) || u.Config.WorkingDir != WorkspaceDir {
				t.Errorf("config %+v", u.Config)
			}
			if fi, err := os.Stat(filepath.Join(u.Rootfs, "bin/busybox")); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("bin/busybox: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(u.Rootfs, "etc/passwd")); err != nil || !strings.Contains(string(b), UserName+":x:1000:1000") {
				t.Errorf("etc/passwd: %q %v", b, err)
			}
			if fi, err := os.Stat(filepath.Join(u.Rootfs, "workspace")); err != nil {
				t.Errorf("workspace: %v", err)
			} else if st, _ := statT(fi); st.Uid != 1000 {
				t.Errorf("workspace owned by %d, want 1000", st.Uid)
			}
			if again, err := UnpackPath(t.Context(), ref, cache); err != nil || again.Rootfs != u.Rootfs {
				t.Errorf("unpacking again: %+v %v", again, err)
			}
			recs := PathRecords(cache)
			if len(recs) != 1 || recs[0].Ref != ref || recs[0].ID != id || !slices.Equal(recs[0].Backends, []string{"local"}) {
				t.Errorf("path records %+v", recs)
			}
			list, err := ListRunnable(t.Context(), t.TempDir(), cache)
			if err != nil {
				t.Fatal(err)
			}
			var listed bool
			for _, r := range list {
				if r.Name == ref {
					listed = true
					if r.ID != id || !r.LocalUnpacked || r.Rootfs != u.Rootfs || !slices.Equal(r.Backends, []string{"docker", "gvisor", "local"}) {
						t.Errorf("image ls: %+v", r)
					}
				}
			}
			if !listed {
				t.Errorf("image ls does not list %s", ref)
			}
		})
	}

	t.Run("a path gone, the engine's copy kept", func(t *testing.T) {
		// The entry of an image unpacked from a path is the engine image's
		// entry too (one per id): the path going must not collect it while
		// the engine still has the image.
		cache := t.TempDir()
		gone := filepath.Join(t.TempDir(), "saved.tar")
		if err := os.Link(saved, gone); err != nil {
			t.Fatal(err)
		}
		u, err := UnpackPath(t.Context(), "docker-archive:"+gone, cache)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(gone)
		items, err := CollectCache(t.Context(), cache, false)
		if err != nil || len(items) != 0 {
			t.Errorf("collected %+v, %v: the engine still has %s", items, err, id)
		}
		if _, err := os.Stat(u.Rootfs); err != nil {
			t.Errorf("the shared entry went: %v", err)
		}
	})

	t.Run("load", func(t *testing.T) {
		// An image the engine does not have: the busybox layers with a
		// config of their own, as a layout.
		files := map[string]any{}
		raw, _ := exec.Command("docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", id).Output()
		var diffIDs []string
		json.Unmarshal(raw, &diffIDs)
		rnd := make([]byte, 4)
		rand.Read(rnd)
		files["os"], files["architecture"] = "linux", goarch()
		files["config"] = map[string]any{"Env": []string{"PATH=/bin", "MARK=" + hex.EncodeToString(rnd)}, "WorkingDir": "/tmp"}
		files["rootfs"] = map[string]any{"type": "layers", "diff_ids": diffIDs}
		config, _ := json.Marshal(files)
		newLayout := filepath.Join(t.TempDir(), "layout")
		layers := layerTars(t, saved)
		newID := imagetest.WriteLayout(t, newLayout, "", config, layers, true)
		t.Cleanup(func() { exec.Command("docker", "rmi", "-f", newID).Run() })
		c, err := connect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got, err := LoadPath(t.Context(), c, "oci:"+newLayout)
		if err != nil {
			t.Fatal(err)
		}
		if got != newID || imageID(t, newID) != newID {
			t.Fatalf("loaded %s, want %s (engine: %q)", got, newID, imageID(t, newID))
		}
		if out := run(t, "docker", "run", "--rm", newID, "/bin/busybox", "sh", "-c", "echo $MARK; pwd"); out != hex.EncodeToString(rnd)+"\n/tmp" {
			t.Errorf("docker run %s: %q", newID, out)
		}
		if tags := run(t, "docker", "image", "inspect", "--format", "{{json .RepoTags}}", newID); tags != "[]" {
			t.Errorf("a path image was loaded with tags %s", tags)
		}

		// A `docker save` archive of an image the engine no longer has.
		name := testName(t, KindDockerfile)
		build := exec.Command("docker", "build", "-q", "-t", name, "-")
		build.Stdin = strings.NewReader("FROM " + DefaultName(KindBusybox) + "\nLABEL mark=" + hex.EncodeToString(rnd) + "\n")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("docker build: %v\n%s", err, out)
		}
		builtID := imageID(t, name)
		savedDir := t.TempDir()
		arch := imagetest.DockerSave(t, name, savedDir)
		run(t, "docker", "rmi", "-f", name)
		if imageID(t, builtID) != "" {
			t.Fatalf("%s still in the engine", builtID)
		}
		t.Cleanup(func() { exec.Command("docker", "rmi", "-f", builtID).Run() })
		if got, err := LoadPath(t.Context(), c, "docker-archive:"+arch); err != nil || got != builtID {
			t.Fatalf("loading the archive: %s %v, want %s", got, err, builtID)
		}
		if out := run(t, "docker", "run", "--rm", builtID, "/bin/busybox", "echo", "ok"); out != "ok" {
			t.Errorf("docker run: %q", out)
		}
	})
}

// layerTars returns the uncompressed layers of a `docker save` archive.
func layerTars(t *testing.T, archive string) [][]byte {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-C", dir, "-xf", archive).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	var ms []struct{ Layers []string }
	b, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	json.Unmarshal(b, &ms)
	var out [][]byte
	for _, l := range ms[0].Layers {
		b, err := os.ReadFile(filepath.Join(dir, l))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestPathImageHostile unpacks layouts whose layers attack the host: the
// unpack refuses them or keeps everything inside the new root, and a
// refused one leaves the cache as it was.
func TestPathImageHostile(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "unpacking keeps owners: run as root")
	}
	outside := t.TempDir()
	type E = imagetest.Entry
	for _, tc := range []struct {
		name   string
		layers [][]E
		err    string
		check  func(t *testing.T, rootfs string)
	}{
		{name: "dotdot", layers: [][]E{{{Name: "ok", Body: "x"}, {Name: "../../../../" + outside + "/escaped", Body: "x"}}}, err: `".." element`},
		{name: "dotdot-inside", layers: [][]E{{{Name: "a/../b", Body: "x"}}}, err: `".." element`},
		{name: "hardlink-out", layers: [][]E{{{Name: "pw", Type: tar.TypeLink, Linkname: "../../../../etc/passwd"}}}, err: `".." element`},
		{name: "hardlink-host", layers: [][]E{{{Name: "pw", Type: tar.TypeLink, Linkname: "/etc/passwd"}}}, err: "no regular file of the image"},
		{name: "symlink-then-file", layers: [][]E{{
			{Name: "lnk", Type: tar.TypeSymlink, Linkname: outside},
			{Name: "lnk/pwned", Body: "x"},
			{Name: "rel", Type: tar.TypeSymlink, Linkname: "../../../../../../" + outside},
			{Name: "rel/pwned2", Body: "x"},
		}}, check: func(t *testing.T, rootfs string) {
			if l, err := os.Readlink(filepath.Join(rootfs, "lnk")); err != nil || l != outside {
				t.Errorf("lnk: %q %v", l, err)
			}
		}},
		{name: "symlink-lower-file-upper", layers: [][]E{
			{{Name: "lnk", Type: tar.TypeSymlink, Linkname: outside}},
			{{Name: "lnk/pwned", Body: "x"}},
		}, check: func(t *testing.T, rootfs string) {
			if fi, err := os.Lstat(filepath.Join(rootfs, "lnk")); err != nil || !fi.IsDir() {
				t.Errorf("lnk should be the upper layer's directory: %v %v", fi, err)
			}
		}},
		{name: "absolute-and-devices", layers: [][]E{{
			{Name: "/abs/file", Body: "inside"},
			{Name: "null", Type: tar.TypeChar},
			{Name: "fifo", Type: tar.TypeFifo},
			{Name: "suid", Body: "x", Mode: 0o4755},
		}}, check: func(t *testing.T, rootfs string) {
			if b, err := os.ReadFile(filepath.Join(rootfs, "abs/file")); err != nil || string(b) != "inside" {
				t.Errorf("abs/file: %q %v", b, err)
			}
			for _, p := range []string{"null", "fifo"} {
				if _, err := os.Lstat(filepath.Join(rootfs, p)); !os.IsNotExist(err) {
					t.Errorf("%s was created: %v", p, err)
				}
			}
		}},
		{name: "whiteouts", layers: [][]E{
			{{Name: "a/", Type: tar.TypeDir}, {Name: "a/x", Body: "lower"}, {Name: "b", Body: "lower"}, {Name: "c/", Type: tar.TypeDir}, {Name: "c/keep", Body: "lower"}},
			{{Name: ".wh.b"}, {Name: "a/", Type: tar.TypeDir}, {Name: "a/.wh..wh..opq"}, {Name: "a/y", Body: "upper"}, {Name: "c/new", Body: "upper"}},
		}, check: func(t *testing.T, rootfs string) {
			for p, want := range map[string]string{"a/x": "", "b": "", "a/y": "upper", "c/keep": "lower", "c/new": "upper"} {
				b, err := os.ReadFile(filepath.Join(rootfs, p))
				if want == "" && !os.IsNotExist(err) || want != "" && string(b) != want {
					t.Errorf("%s: %q %v, want %q", p, b, err, want)
				}
			}
		}},
		{name: "opaque-root", layers: [][]E{
			{{Name: "old", Body: "lower"}, {Name: "dir/", Type: tar.TypeDir}, {Name: "dir/old", Body: "lower"}},
			{{Name: ".wh..wh..opq"}, {Name: "new", Body: "upper"}},
		}, check: func(t *testing.T, rootfs string) {
			ents, _ := os.ReadDir(rootfs)
			if len(ents) != 1 || ents[0].Name() != "new" {
				t.Errorf("root holds %v, want only new", ents)
			}
		}},
		{name: "lower-dir-metadata", layers: [][]E{
			{{Name: "d/", Type: tar.TypeDir, Mode: 0o1777}, {Name: "d/old", Body: "lower"}},
			{{Name: "d/new", Body: "upper"}},
		}, check: func(t *testing.T, rootfs string) {
			// The upper layer names no entry for d: the lower one's mode shows.
			if fi, err := os.Stat(filepath.Join(rootfs, "d")); err != nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("d: %v %v, want drwxrwxrwt", fi.Mode(), err)
			}
		}},
		{name: "huge", layers: [][]E{{{Name: "big", Size: 3 << 20}}}, err: "bytes uncompressed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "huge" {
				old := MaxImageBytes
				MaxImageBytes = 1 << 20
				t.Cleanup(func() { MaxImageBytes = old })
			}
			var layers [][]byte
			for _, l := range tc.layers {
				layers = append(layers, imagetest.Layer(t, l...))
			}
			layout := filepath.Join(t.TempDir(), "layout")
			imagetest.WriteLayout(t, layout, "", nil, layers, tc.name == "whiteouts")
			cache := t.TempDir()
			u, err := UnpackPath(t.Context(), "oci:"+layout, cache)
			if ents, _ := os.ReadDir(outside); len(ents) > 0 {
				t.Errorf("wrote outside the root: %v", ents)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), layout) {
					t.Fatalf("err %v, want one naming %s and saying %q", err, layout, tc.err)
				}
				if ents, _ := os.ReadDir(cache); len(ents) > 1 { // the lock file only
					t.Errorf("a refused image left %v in the cache", ents)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, u.Rootfs)
		})
	}
}

// TestPathImageBad: missing paths, wrong kinds and corrupt archives give a
// clear error naming the path, and change nothing.
func TestPathImageBad(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.tar")
	os.WriteFile(garbage, []byte(strings.Repeat("not a tar ", 100)), 0o644)
	layout := filepath.Join(dir, "layout")
	imagetest.WriteLayout(t, layout, "v1", nil, [][]byte{imagetest.Layer(t, imagetest.Entry{Name: "f", Body: "x"})}, false)
	corrupt := filepath.Join(dir, "corrupt")
	imagetest.WriteLayout(t, corrupt, "", nil, [][]byte{imagetest.Layer(t, imagetest.Entry{Name: "f", Body: "original"})}, false)
	// Change one byte of the layer blob, keeping its name.
	blobs, _ := filepath.Glob(filepath.Join(corrupt, "blobs/sha256/*"))
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		if i := strings.Index(string(data), "original"); i >= 0 {
			data[i] = 'O'
			os.WriteFile(b, data, 0o644)
		}
	}
	for _, tc := range []struct{ ref, want string }{
		{"oci:" + filepath.Join(dir, "missing"), "no such file"},
		{"oci:" + garbage, "not a directory"},
		{"oci-archive:" + garbage, "not a tar archive"},
		{"docker-archive:" + layout, "is a directory"},
		{"oci:" + layout + ":v2", `no image tagged "v2"`},
		{"oci:" + dir, "not an OCI layout"},
		{"oci:" + corrupt, "corrupt"},
	} {
		cache := filepath.Join(t.TempDir(), "cache")
		_, err := UnpackPath(t.Context(), tc.ref, cache)
		path := strings.SplitN(strings.SplitN(tc.ref, ":", 2)[1], ":v", 2)[0]
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want an invalid error naming %s and saying %q", tc.ref, err, path, tc.want)
		}
		if ents, _ := os.ReadDir(cache); len(ents) > 1 {
			t.Errorf("%s: left %v in the cache", tc.ref, ents)
		}
	}
}

func goarch() string { return runtime.GOARCH }
