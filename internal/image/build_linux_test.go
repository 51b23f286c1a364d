package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// debianEnv switches on the Debian build test: it runs debootstrap against
// a real mirror and takes minutes.
const debianEnv = "AGENTBOX_TEST_DEBIAN"

func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	skip.OrFail(t, reason)
}

// requireEngine skips (or fails under AGENTBOX_REQUIRE_SETUP=1) unless this
// runs as root next to a reachable Docker engine and its CLI, which the
// tests use as an independent oracle.
func requireEngine(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "image builds create root-owned trees: run as root")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		skipOrFail(t, "the docker CLI is not installed")
	}
	c, err := connect(t.Context())
	if err != nil {
		skipOrFail(t, err.Error())
	}
	c.Close()
}

// testName is an image name no one else uses, removed when the test ends.
func testName(t *testing.T, kind Kind) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := fmt.Sprintf("agentbox-test/%s:%s", kind, hex.EncodeToString(b))
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", name).Run() })
	return name
}

// run runs a command and returns its trimmed output, failing the test on
// error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// sandboxRun is `docker run` with the isolation the docker backend uses.
func sandboxRun(t *testing.T, image string, extra []string, script string) string {
	t.Helper()
	args := append([]string{"run", "--rm", "--network", "none", "--user", "1000:1000", "--read-only",
		"--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}, extra...)
	return run(t, "docker", append(args, image, "/bin/sh", "-c", script)...)
}

// logWriter sends build progress to the test log.
type logWriter struct {
	t    *testing.T
	buf  bytes.Buffer
	part string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	s := w.part + string(p)
	lines := strings.Split(s, "\n")
	w.part = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		w.t.Log(l)
	}
	return len(p), nil
}

func imageID(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", name).CombinedOutput()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// imagesWithRecipe lists every image (tagged or not) carrying a recipe label.
func imagesWithRecipe(t *testing.T, hash string) []string {
	t.Helper()
	c, err := connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.ImageList(t.Context(), client.ImageListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelRecipe+"="+hash)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range res.Items {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

// dirNames lists a directory, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestBuildBusybox(t *testing.T) {
	requireEngine(t)
	ctx := t.Context()
	rootfs := filepath.Join(t.TempDir(), "images", "busybox", "rootfs")
	name := testName(t, KindBusybox)
	progress := &logWriter{t: t}
	opts := BuildOptions{Kind: KindBusybox, Name: name, RootfsDir: rootfs, Progress: progress}

	start := time.Now()
	img, err := Build(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("busybox: built in %s, %s in the engine", took.Round(time.Millisecond), humanBytes(img.SizeBytes))
	if took > 30*time.Second {
		t.Errorf("the busybox build took %s; it should take seconds", took)
	}
	if img.Name != name || img.Kind != KindBusybox || img.Rootfs != rootfs || img.UID != 1000 || img.GID != 1000 ||
		!strings.HasPrefix(img.ID, "sha256:") || img.SizeBytes < 1<<20 || time.Since(img.Created) > time.Minute {
		t.Errorf("unexpected image %+v", img)
	}
	if id := imageID(t, name); id != img.ID {
		t.Fatalf("engine has %s as %q, Build said %q", name, id, img.ID)
	}

	t.Run("docker", func(t *testing.T) {
		out := sandboxRun(t, name, nil, "id -u; ls /workspace; echo ok")
		if out != "1000\nok" {
			t.Errorf("output %q, want \"1000\\nok\"", out)
		}
		out = sandboxRun(t, name, nil, `id -un; echo $HOME; pwd; stat -c '%n %u:%g %a' /workspace /home/agent /tmp /root; `+
			`for a in sh ls sed grep find xargs sha256sum base64 mkfifo nproc; do readlink -f $(which $a); done; /usr/bin/env true && echo env-ok`)
		want := "agent\n/home/agent\n/workspace\n" +
			"/workspace 1000:1000 755\n/home/agent 1000:1000 755\n/tmp 0:0 1777\n/root 0:0 700\n" +
			strings.Repeat("/bin/busybox\n", 10) + "env-ok"
		if out != want {
			t.Errorf("inside the image:\n%s\nwant:\n%s", out, want)
		}
		var cfg struct {
			User       string
			WorkingDir string
			Env        []string
			Labels     map[string]string
		}
		if err := json.Unmarshal([]byte(run(t, "docker", "image", "inspect", "--format", "{{json .Config}}", name)), &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.User != "" || cfg.WorkingDir != "/workspace" || !slices.Contains(cfg.Env, "PATH="+pathEnv) ||
			cfg.Labels[LabelKind] != "busybox" || cfg.Labels[LabelUID] != "1000" || len(cfg.Labels[LabelRecipe]) != 64 {
			t.Errorf("image config %+v", cfg)
		}
	})

	t.Run("gvisor", func(t *testing.T) {
		if !strings.Contains(run(t, "docker", "info", "--format", "{{json .Runtimes}}"), `"runsc"`) {
			skipOrFail(t, "runsc is not registered with the engine")
		}
		if out := sandboxRun(t, name, []string{"--runtime", "runsc"}, "id -u; ls /workspace; echo ok"); out != "1000\nok" {
			t.Errorf("output %q under runsc", out)
		}
	})

	t.Run("bwrap", func(t *testing.T) {
		if _, err := exec.LookPath("bwrap"); err != nil {
			skipOrFail(t, "bubblewrap is not installed")
		}
		out := run(t, "bwrap", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
			"--unshare-all", "--uid", "1000", "/bin/sh", "-c", "id -u; ls /workspace; echo ok")
		if out != "1000\nok" {
			t.Errorf("output %q under bwrap", out)
		}
		if rel := readRelease(rootfs); !strings.Contains(rel, "KIND=busybox\n") {
			t.Errorf("release file %q", rel)
		}
	})

	t.Run("idempotent", func(t *testing.T) {
		progress.buf.Reset()
		start := time.Now()
		again, err := Build(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != img.ID || !strings.Contains(progress.buf.String(), "up to date") {
			t.Errorf("second build made %s (first %s): %s", again.ID, img.ID, progress.buf.String())
		}
		t.Logf("a second build took %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("lost rootfs comes back without a new image", func(t *testing.T) {
		if err := os.RemoveAll(rootfs); err != nil {
			t.Fatal(err)
		}
		again, err := Build(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != img.ID || readRelease(rootfs) == "" {
			t.Errorf("image %s (was %s), release %q", again.ID, img.ID, readRelease(rootfs))
		}
	})

	t.Run("lost image is imported from the rootfs", func(t *testing.T) {
		run(t, "docker", "rmi", name)
		progress.buf.Reset()
		again, err := Build(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID == "" || again.ID != imageID(t, name) || strings.Contains(progress.buf.String(), "building a busybox root") {
			t.Errorf("image %s, progress:\n%s", again.ID, progress.buf.String())
		}
		img = again
	})

	t.Run("force replaces and removes the old image", func(t *testing.T) {
		o := opts
		o.Force = true
		again, err := Build(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if again.ID == img.ID {
			t.Fatalf("forced build kept image %s", img.ID)
		}
		if id := imageID(t, img.ID); id != "" {
			t.Errorf("the old image %s is still in the engine", img.ID)
		}
		if got := dirNames(t, filepath.Dir(rootfs)); !slices.Equal(got, []string{".rootfs.lock", "rootfs"}) {
			t.Errorf("left next to the rootfs: %v", got)
		}
		img = again
	})

	t.Run("list and exists", func(t *testing.T) {
		list, err := List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list, func(i Image) bool { return i.Name == name })
		if i < 0 {
			t.Fatalf("%s not listed in %+v", name, list)
		}
		if got := list[i]; got.ID != img.ID || got.Kind != KindBusybox || got.UID != 1000 || got.SizeBytes != img.SizeBytes {
			t.Errorf("listed as %+v, built as %+v", got, img)
		}
		for ref, want := range map[string]bool{name: true, img.ID: true, "agentbox-test/none:" + name[len(name)-8:]: false} {
			if got, err := Exists(ctx, ref); err != nil || got != want {
				t.Errorf("Exists(%s) = %v, %v; want %v", ref, got, err, want)
			}
		}
		if _, err := Exists(ctx, "Not A Name"); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Exists of a bad name: %v", err)
		}
	})
}

// TestBuildRollback fails a build at each step, over an existing image and
// over nothing, and checks that the engine and the disk are as before.
func TestBuildRollback(t *testing.T) {
	requireEngine(t)
	ctx := t.Context()
	for _, stepName := range []string{"built", "imported", "installed"} {
		for _, over := range []string{"nothing", "existing"} {
			t.Run(stepName+" over "+over, func(t *testing.T) {
				rootfs := filepath.Join(t.TempDir(), "rootfs")
				// A uid of its own gives the test a recipe no one else builds.
				opts := BuildOptions{Kind: KindBusybox, Name: testName(t, KindBusybox), RootfsDir: rootfs, UID: 4242, GID: 4242}
				var before Image
				if over == "existing" {
					var err error
					if before, err = Build(ctx, opts); err != nil {
						t.Fatal(err)
					}
					opts.Force = true
				}
				injected := errors.New("injected failure")
				failAt = func(s string) error {
					if s == stepName {
						return injected
					}
					return nil
				}
				_, err := Build(ctx, opts)
				failAt = nil
				if !errors.Is(err, injected) || !strings.Contains(err.Error(), "building image "+opts.Name) {
					t.Fatalf("error %v", err)
				}
				if id := imageID(t, opts.Name); id != before.ID {
					t.Errorf("%s is now %q, was %q", opts.Name, id, before.ID)
				}
				wantNames := []string{".rootfs.lock"}
				if over == "existing" {
					wantNames = append(wantNames, "rootfs")
					hash := releaseField(readRelease(rootfs), "RECIPE")
					if hash == "" {
						t.Fatal("the old rootfs lost its release file")
					}
					if got := imagesWithRecipe(t, hash); !slices.Equal(got, []string{before.ID}) {
						t.Errorf("images with the recipe: %v, want only %s", got, before.ID)
					}
				}
				if got := dirNames(t, filepath.Dir(rootfs)); !slices.Equal(got, wantNames) {
					t.Errorf("left next to the rootfs: %v, want %v", got, wantNames)
				}
			})
		}
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	requireEngine(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts BuildOptions
		want string
	}{
		{"unknown kind", BuildOptions{Kind: "alpine"}, "unknown kind"},
		{"uid of nobody", BuildOptions{Kind: KindBusybox, UID: 65534}, `uid 65534 is nobody's`},
		{"bad name", BuildOptions{Kind: KindBusybox, Name: "agentbox/Busybox"}, `image name "agentbox/Busybox"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			tc.opts.RootfsDir = filepath.Join(parent, "x", "rootfs")
			if tc.opts.Kind == KindBusybox && tc.opts.Name == "" {
				tc.opts.Name = testName(t, KindBusybox)
			}
			_, err := Build(ctx, tc.opts)
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tc.want)
			}
			if got := dirNames(t, filepath.Join(parent, "x")); len(got) > 1 || (len(got) == 1 && got[0] != ".rootfs.lock") {
				t.Errorf("left behind: %v", got)
			}
			if tc.opts.Name != "" && imageID(t, tc.opts.Name) != "" {
				t.Errorf("image %s exists", tc.opts.Name)
			}
		})
	}
}

func TestEngineUnavailable(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "image builds create root-owned trees: run as root")
	}
	ctx := t.Context()
	dir := t.TempDir()
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "no-engine.sock"))
	rootfs := filepath.Join(dir, "images", "busybox", "rootfs")

	_, err := Build(ctx, BuildOptions{Kind: KindBusybox, RootfsDir: rootfs})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "building image agentbox/busybox:latest: docker engine at unix://") {
		t.Errorf("Build: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(rootfs)); !os.IsNotExist(err) {
		t.Errorf("a failed build created %s", filepath.Dir(rootfs))
	}
	if _, err := List(ctx); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("List: %v", err)
	}
	if _, err := Exists(ctx, "busybox"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Exists: %v", err)
	}

	// Without an engine the local backend still gets its root.
	img, err := Build(ctx, BuildOptions{Kind: KindBusybox, RootfsDir: rootfs, NoEngine: true})
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != "" || img.Rootfs != rootfs || img.SizeBytes < 1<<20 || !strings.Contains(readRelease(rootfs), "KIND=busybox") {
		t.Errorf("NoEngine build: %+v", img)
	}
}

// TestBuildDebian builds the Debian image for real (minutes: debootstrap
// from the host's mirror) and leaves agentbox/debian:bookworm in the engine.
//
//	AGENTBOX_TEST_DEBIAN=1 go test ./internal/image -run TestBuildDebian -v -timeout 30m
//
// AGENTBOX_TEST_DEBIAN_CACHE names a cache directory kept between runs.
func TestBuildDebian(t *testing.T) {
	if os.Getenv(debianEnv) != "1" {
		skipOrFail(t, fmt.Sprintf("set %s=1 to debootstrap the Debian image (takes minutes; scripts/test.sh sets it)", debianEnv))
	}
	requireEngine(t)
	ctx := t.Context()
	dir := t.TempDir()
	cache := os.Getenv("AGENTBOX_TEST_DEBIAN_CACHE")
	if cache == "" {
		cache = filepath.Join(dir, "cache")
	}
	rootfs := filepath.Join(dir, "debian", "rootfs")
	progress := &logWriter{t: t}
	opts := BuildOptions{Kind: KindDebian, RootfsDir: rootfs, CacheDir: cache, Force: true, Progress: progress}
	t.Logf("mirror detected on this host: %s", DetectMirror())

	start := time.Now()
	img, err := Build(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("debian: built in %s, %s in the engine (%d bytes)", time.Since(start).Round(time.Second), humanBytes(img.SizeBytes), img.SizeBytes)
	name := img.Name
	if name != "agentbox/debian:bookworm" || img.Kind != KindDebian || img.UID != 1000 {
		t.Errorf("unexpected image %+v", img)
	}

	t.Run("tools as uid 1000", func(t *testing.T) {
		out := sandboxRun(t, name, nil, `set -e; id -un; git --version; python3 -m pytest --version; gcc --version | head -1; `+
			`make --version | head -1; ps -o user= -p $$; test -z "$(git config --system --get-all safe.directory)" && echo no-safe-directory`)
		for _, want := range []string{"agent\n", "git version 2.", "pytest 7.", "gcc (Debian 12", "GNU Make 4.", "no-safe-directory"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("workspace repo owned by uid 1000", func(t *testing.T) {
		repo := filepath.Join(t.TempDir(), "repo")
		files := map[string]string{
			"hello.c":       "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
			"Makefile":      "hello: hello.c\n\tgcc -o $@ $<\n",
			"test_hello.py": "import subprocess\n\ndef test_hello():\n    assert subprocess.check_output(['./hello']) == b'hello\\n'\n",
			".gitignore":    "hello\n__pycache__/\n",
		}
		os.MkdirAll(repo, 0o755)
		for p, c := range files {
			os.WriteFile(filepath.Join(repo, p), []byte(c), 0o644)
		}
		run(t, "git", "-C", repo, "init", "-q", "-b", "main")
		run(t, "git", "-C", repo, "-c", "user.name=Host", "-c", "user.email=host@example.invalid", "add", ".")
		run(t, "git", "-C", repo, "-c", "user.name=Host", "-c", "user.email=host@example.invalid", "commit", "-q", "-m", "initial")
		run(t, "chown", "-R", "1000:1000", repo)
		mount := []string{"-v", repo + ":/workspace"}
		out := sandboxRun(t, name, mount, `set -e; git status --short; make -s; python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -1; `+
			`echo change >> hello.c; git add hello.c; git commit -q -m "from the sandbox"; git log --format='%an %s' -1; git status --short`)
		if !strings.Contains(out, "1 passed") || !strings.Contains(out, "agentbox agent from the sandbox") {
			t.Errorf("in the workspace:\n%s", out)
		}
		// Host-side git runs as root here, so it needs the exception that
		// the sandbox user does not.
		if got := run(t, "git", "-c", "safe.directory=*", "-C", repo, "log", "--format=%s", "-1"); got != "from the sandbox" {
			t.Errorf("host sees last commit %q", got)
		}
		// The control: the same repo owned by root is refused by git's
		// ownership check, so the check is on and ownership is what passes it.
		run(t, "chown", "-R", "0:0", repo)
		ctl, err := exec.Command("docker", "run", "--rm", "--network", "none", "--user", "1000:1000", "--read-only",
			"-v", repo+":/workspace", name, "git", "status").CombinedOutput()
		if err == nil || !strings.Contains(string(ctl), "dubious ownership") {
			t.Errorf("git status on a root-owned repo: %v\n%s", err, ctl)
		}
	})

	t.Run("bwrap", func(t *testing.T) {
		out := run(t, "bwrap", "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
			"--unshare-all", "--uid", "1000", "--gid", "1000", "/bin/sh", "-c", "id -un; git --version; python3 -c 'print(6*7)'")
		if !strings.Contains(out, "agent\ngit version") || !strings.HasSuffix(out, "42") {
			t.Errorf("under bwrap:\n%s", out)
		}
	})

	t.Run("second build is a no-op", func(t *testing.T) {
		o := opts
		o.Force = false
		start := time.Now()
		again, err := Build(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("second build took %s", took.Round(time.Millisecond))
		if again.ID != img.ID || took > 10*time.Second {
			t.Errorf("second build: %s in %s (first %s)", again.ID, took, img.ID)
		}
	})

	t.Run("another uid from the cache", func(t *testing.T) {
		o := BuildOptions{Kind: KindDebian, Name: testName(t, KindDebian), RootfsDir: filepath.Join(dir, "debian1001", "rootfs"),
			CacheDir: cache, UID: 1001, GID: 1001, Progress: progress}
		progress.buf.Reset()
		start := time.Now()
		other, err := Build(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build from the cached debootstrap result took %s", time.Since(start).Round(time.Second))
		if !strings.Contains(progress.buf.String(), "unpacking the cached debootstrap result") {
			t.Errorf("the cache was not used:\n%s", progress.buf.String())
		}
		if out := sandboxRun(t, other.Name, []string{"--user", "agent"}, "id -u; id -g; stat -c %u /workspace"); out != "1001\n1001\n1001" {
			t.Errorf("uid in the image: %q", out)
		}
	})
}

// releaseField returns KEY's value from a release file.
func releaseField(release, key string) string {
	for _, l := range strings.Split(release, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	return ""
}

// cancelOn cancels a build when its progress shows a line with marker.
type cancelOn struct {
	marker string
	cancel context.CancelFunc
	seen   strings.Builder
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.seen.Write(p)
	if strings.Contains(c.seen.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

// TestBuildDebianCancel cancels debootstrap while it configures packages
// inside the target (with /proc mounted there) and checks that nothing is
// left: no directory, no mount, no process, no cache entry.
func TestBuildDebianCancel(t *testing.T) {
	if os.Getenv(debianEnv) != "1" {
		skipOrFail(t, fmt.Sprintf("set %s=1 to debootstrap the Debian image (takes minutes; scripts/test.sh sets it)", debianEnv))
	}
	requireEngine(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	progress := &cancelOn{marker: "I: Configuring ", cancel: cancel}
	rootfs := filepath.Join(dir, "debian", "rootfs")
	_, err := Build(ctx, BuildOptions{Kind: KindDebian, Name: testName(t, KindDebian), RootfsDir: rootfs, Progress: progress})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "debootstrap") {
		t.Fatalf("error %v, want a cancelled debootstrap", err)
	}
	if !strings.Contains(progress.seen.String(), progress.marker) {
		t.Fatal("cancelled before debootstrap configured anything")
	}
	if got := dirNames(t, filepath.Dir(rootfs)); !slices.Equal(got, []string{".rootfs.lock"}) {
		t.Errorf("left behind: %v", got)
	}
	if got := dirNames(t, filepath.Join(dir, "debian", "cache")); len(got) > 0 {
		t.Errorf("cache after a cancelled build: %v", got)
	}
	if mounts, err := mountsUnder(dir); err != nil || len(mounts) > 0 {
		t.Errorf("mounts left: %v %v", mounts, err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(dir)) {
			t.Errorf("process left: %s: %q", p, b)
		}
	}
}

// TestBuildDebianBadMirror needs no network: debootstrap fails at once on a
// mirror that does not answer, and the error says why.
func TestBuildDebianBadMirror(t *testing.T) {
	requireEngine(t)
	if _, err := exec.LookPath("debootstrap"); err != nil {
		skipOrFail(t, "debootstrap is not installed")
	}
	rootfs := filepath.Join(t.TempDir(), "debian", "rootfs")
	name := testName(t, KindDebian)
	_, err := Build(t.Context(), BuildOptions{Kind: KindDebian, Name: name, RootfsDir: rootfs, Mirror: "http://127.0.0.1:9/debian"})
	if err == nil || !strings.Contains(err.Error(), "building image "+name+": debootstrap failed: exit status 1") ||
		!strings.Contains(err.Error(), "127.0.0.1:9") {
		t.Fatalf("error %v", err)
	}
	t.Logf("error: %v", err)
	if got := dirNames(t, filepath.Dir(rootfs)); !slices.Equal(got, []string{".rootfs.lock"}) {
		t.Errorf("left behind: %v", got)
	}
}

func TestAddUser(t *testing.T) {
	base := func(t *testing.T) string {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, "etc/skel"), 0o755)
		os.MkdirAll(filepath.Join(root, "home"), 0o755)
		os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin"), 0o644)
		os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nusers:x:100:\n"), 0o644)
		os.WriteFile(filepath.Join(root, "etc/shadow"), []byte("root:*:19000:0:99999:7:::\n"), 0o640)
		os.WriteFile(filepath.Join(root, "etc/skel/.profile"), []byte("# profile\n"), 0o644)
		return root
	}
	t.Run("uid taken", func(t *testing.T) {
		err := addUser(base(t), "debian", BuildOptions{UID: 42, GID: 1000}, "/bin/bash")
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `uid 42 is taken by "_apt" in the debian base`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("existing gid becomes the primary group", func(t *testing.T) {
		if os.Geteuid() != 0 {
			skipOrFail(t, "addUser chowns the home: run as root")
		}
		root := base(t)
		if err := addUser(root, "debian", BuildOptions{UID: 1000, GID: 100}, "/bin/bash"); err != nil {
			t.Fatal(err)
		}
		read := func(p string) string { b, _ := os.ReadFile(filepath.Join(root, p)); return string(b) }
		if got := read("etc/passwd"); !strings.HasSuffix(got, "\nagent:x:1000:100:agentbox sandbox user:/home/agent:/bin/bash\n") {
			t.Errorf("passwd %q", got)
		}
		if got := read("etc/group"); got != "root:x:0:\nusers:x:100:\n" {
			t.Errorf("group %q", got)
		}
		if got := read("etc/shadow"); !strings.HasSuffix(got, "\nagent:!::0:99999:7:::\n") {
			t.Errorf("shadow %q", got)
		}
		fi, err := os.Stat(filepath.Join(root, "home/agent/.profile"))
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := statT(fi); st.Uid != 1000 || st.Gid != 100 {
			t.Errorf(".profile owned by %d:%d", st.Uid, st.Gid)
		}
	})
}

// TestRemoveTreeNeverDeletesThroughAMount bind-mounts a "host" directory
// into a build tree, as a killed debootstrap can leave /dev, and checks that
// removing the tree leaves the host's files alone.
func TestRemoveTreeNeverDeletesThroughAMount(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "bind mounts need root")
	}
	host := t.TempDir()
	canary := filepath.Join(host, "canary")
	os.WriteFile(canary, []byte("keep"), 0o644)
	tree := filepath.Join(t.TempDir(), "tree with space")
	target := filepath.Join(tree, "dev")
	os.MkdirAll(target, 0o755)
	run(t, "mount", "--bind", host, target)
	t.Cleanup(func() { exec.Command("umount", "-l", target).Run() })

	if err := removeTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(canary); err != nil {
		t.Fatalf("the host's file went with the tree: %v", err)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if m, _ := mountsUnder(filepath.Dir(tree)); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
