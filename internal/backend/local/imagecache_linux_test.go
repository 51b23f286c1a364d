package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/image/imagetest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// TestCollectImages: the collector removes an unpacked image whose engine
// image is gone and one whose path is gone, but not while a sandbox runs
// from it, and keeps those whose image is still there.
func TestCollectImages(t *testing.T) {
	requireJails(t)
	if err := exec.Command("docker", "image", "inspect", "agentbox/busybox:latest").Run(); err != nil {
		backendtest.SkipOrFail(t, "this test needs the engine's busybox image: "+err.Error())
	}
	cache := t.TempDir()
	b := newBackendWith(t, Options{StateDir: filepath.Join(t.TempDir(), "state"), ImagesDir: imagesDir,
		CgroupParent: "agentbox-test-" + randHex(4), ImageCache: cache})
	ctx := t.Context()
	dir := t.TempDir()
	saved := imagetest.DockerSave(t, "agentbox/busybox:latest", dir)

	// A path image the engine does not have: busybox's layers, a config
	// of its own.
	layout := filepath.Join(dir, "layout")
	mark := make([]byte, 4)
	rand.Read(mark)
	raw, err := exec.Command("docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", "agentbox/busybox:latest").Output()
	if err != nil {
		t.Fatal(err)
	}
	var diffIDs []string
	json.Unmarshal(raw, &diffIDs)
	config, _ := json.Marshal(map[string]any{"os": "linux", "architecture": runtime.GOARCH,
		"config": map[string]any{"Env": []string{"PATH=/bin", "MARK=" + hex.EncodeToString(mark)}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	pathID := imagetest.WriteLayout(t, layout, "", config, layersOf(t, saved), true)

	// An engine image that goes away, and one that stays.
	name := "agentbox-test/collect:" + randHex(4)
	build := exec.Command("docker", "build", "-q", "-t", name, "-")
	build.Stdin = strings.NewReader("FROM agentbox/busybox:latest\nLABEL mark=" + hex.EncodeToString(mark) + "\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", name).Run() })
	// A sandbox from it first: the engine's image unpacked on first use,
	// into an entry only root can enter, which the stage still binds.
	y := startBox(t, b, sandbox.Spec{Image: name})
	if got := strings.TrimSpace(y.mustSh(t, "echo engine")); got != "engine" {
		t.Fatalf("the engine image's sandbox says %q", got)
	}
	y.conn.Close()
	y.conn = nil
	if err := b.Remove(context.Background(), y.id); err != nil {
		t.Fatal(err)
	}
	gone, ok := image.CachedID(cache, imageIDOf(t, name))
	if !ok {
		t.Fatalf("%s is not in the cache after a sandbox ran from it", name)
	}
	if fi, err := os.Stat(filepath.Dir(gone.Rootfs)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("cache entry %s: %v %v, want mode 0700", filepath.Dir(gone.Rootfs), fi.Mode(), err)
	}
	kept, err := image.Unpack(ctx, "agentbox/busybox:latest", cache)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("docker", "rmi", "-f", name).CombinedOutput(); err != nil {
		t.Fatalf("docker rmi: %v %s", err, out)
	}

	x := startBox(t, b, sandbox.Spec{Image: "oci:" + layout})
	if got := strings.TrimSpace(x.mustSh(t, "echo ok")); got != "ok" {
		t.Fatalf("the path image's sandbox says %q", got)
	}
	if err := os.RemoveAll(layout); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		_, err := os.Stat(filepath.Join(cache, strings.TrimPrefix(id, "sha256:"), "rootfs"))
		return err == nil
	}
	ids := func(items []sandbox.CollectedImage) (out []string) {
		for _, it := range items {
			out = append(out, it.ID)
		}
		return out
	}

	items, err := b.CollectImages(ctx, true)
	if err != nil || len(items) != 1 || items[0].ID != gone.ID || items[0].Removed || items[0].Bytes <= 0 {
		t.Fatalf("dry run: %+v %v, want only %s (the other is in use)", items, err, gone.ID)
	}
	if !exists(gone.ID) {
		t.Fatal("a dry run removed an image")
	}
	items, err = b.CollectImages(ctx, false)
	if err != nil || len(items) != 1 || items[0].ID != gone.ID || !items[0].Removed || !strings.Contains(items[0].Reason, "engine no longer has it") {
		t.Fatalf("collecting: %+v %v", items, err)
	}
	if exists(gone.ID) || !exists(kept.ID) || !exists(pathID) {
		t.Fatalf("after collecting: gone %v kept %v path %v", exists(gone.ID), exists(kept.ID), exists(pathID))
	}
	if got := strings.TrimSpace(x.mustSh(t, "echo still")); got != "still" {
		t.Fatalf("the running sandbox: %q", got)
	}

	x.conn.Close()
	x.conn = nil
	if err := b.Remove(context.Background(), x.id); err != nil {
		t.Fatal(err)
	}
	items, err = b.CollectImages(ctx, false)
	if got := ids(items); err != nil || len(got) != 1 || got[0] != pathID || !strings.Contains(items[0].Reason, "path no longer holds") {
		t.Fatalf("collecting after the sandbox ended: %+v %v", items, err)
	}
	if exists(pathID) || !exists(kept.ID) {
		t.Fatalf("after the second run: path %v kept %v", exists(pathID), exists(kept.ID))
	}
	if recs := image.PathRecords(cache); len(recs) != 0 {
		t.Errorf("records of a gone path are kept: %+v", recs)
	}
	os.RemoveAll(filepath.Join(cache, strings.TrimPrefix(kept.ID, "sha256:")))
}

// layersOf returns the uncompressed layers of a `docker save` archive.
func layersOf(t *testing.T, archive string) [][]byte {
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
		data, err := os.ReadFile(filepath.Join(dir, l))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

func imageIDOf(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", name).Output()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
