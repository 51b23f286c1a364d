package image

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// TestDockerfileUnpackList builds an image from a Dockerfile (FROM the busybox image,
// with ENV, WORKDIR, USER and a device node), unpacks it for the local backend twice at
// once, and lists it with the backends that can run it.
func TestDockerfileUnpackList(t *testing.T) {
	requireEngine(t)
	ctx := t.Context()
	base := testName(t, KindBusybox)
	if _, err := Build(ctx, BuildOptions{Kind: KindBusybox, Name: base}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	df := "FROM " + base + `
ENV PATH=/opt/tools/bin:/usr/bin:/bin GREETING=hello
RUN mkdir -p /opt/tools/bin && printf '#!/bin/sh\necho tool $GREETING\n' > /opt/tools/bin/mytool && chmod 755 /opt/tools/bin/mytool && mknod /opt/null c 1 3 && mkfifo /opt/fifo
COPY context.txt /opt/context.txt
WORKDIR /opt
USER 1000:1000
`
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644)
	os.WriteFile(filepath.Join(dir, "context.txt"), []byte("from the context\n"), 0o644)
	name := testName(t, KindDockerfile)
	img, err := BuildDockerfile(ctx, DockerfileOptions{Dockerfile: filepath.Join(dir, "Dockerfile"), Name: name, Progress: &logWriter{t: t}})
	if err != nil {
		t.Fatal(err)
	}
	if img.Kind != KindDockerfile || img.ID != imageID(t, name) {
		t.Errorf("built %+v, engine has %s", img, imageID(t, name))
	}
	if out := run(t, "docker", "run", "--rm", name, "mytool"); out != "tool hello" {
		t.Errorf("docker run %s mytool: %q", name, out)
	}

	cache := t.TempDir()
	var wg sync.WaitGroup
	res := make([]Unpacked, 2)
	errs := make([]error, 2)
	for i := range res {
		wg.Go(func() { res[i], errs[i] = Unpack(ctx, name, cache) })
	}
	wg.Wait()
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("unpack %d: %v", i, errs[i])
		}
	}
	u := res[0]
	if res[1].Rootfs != u.Rootfs || u.ID != img.ID || u.Rootfs != filepath.Join(cache, strings.TrimPrefix(img.ID, "sha256:"), "rootfs") {
		t.Errorf("unpacked %+v and %+v", res[0], res[1])
	}
	if !slices.Contains(u.Config.Env, "GREETING=hello") || u.Config.WorkingDir != "/opt" || u.Config.User != "1000:1000" {
		t.Errorf("config %+v", u.Config)
	}
	if b, err := os.ReadFile(filepath.Join(u.Rootfs, "opt/context.txt")); err != nil || string(b) != "from the context\n" {
		t.Errorf("context file: %q %v", b, err)
	}
	for _, p := range []string{"opt/null", "opt/fifo"} {
		if _, err := os.Lstat(filepath.Join(u.Rootfs, p)); !os.IsNotExist(err) {
			t.Errorf("%s is in the unpacked root (%v): device nodes and FIFOs are left out", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(u.Rootfs, "bin/busybox")); err != nil || fi.Sys() == nil {
		t.Errorf("busybox: %v", err)
	}
	if again, ok := CachedID(cache, img.ID); !ok || again.Rootfs != u.Rootfs {
		t.Errorf("CachedID: %+v %v", again, ok)
	}

	if _, err := Unpack(ctx, "agentbox-test/no-such-image:1", cache); err == nil || !strings.Contains(err.Error(), "nothing is pulled") {
		t.Errorf("unpacking a missing image: %v", err)
	} else if !isInvalid(err) {
		t.Errorf("unpacking a missing image: %v, want invalid", err)
	}

	list, err := ListRunnable(ctx, t.TempDir(), cache)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range list {
		if r.Name == name {
			found = true
			if !slices.Equal(r.Backends, []string{"docker", "gvisor", "local"}) || !r.LocalUnpacked || r.Rootfs != u.Rootfs {
				t.Errorf("listed %+v", r)
			}
		}
	}
	if !found {
		t.Errorf("%s not listed in %v", name, list)
	}
}

func isInvalid(err error) bool { return errors.Is(err, errdefs.ErrInvalid) }
