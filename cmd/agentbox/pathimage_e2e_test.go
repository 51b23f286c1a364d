package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/image/imagetest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestPathImageThroughTheCLI runs a sandbox from an OCI layout named by
// path on every backend, through the daemon, and finds it in `image ls`.
func TestPathImageThroughTheCLI(t *testing.T) {
	everyBackend(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		layout := filepath.Join(dir, "layout")
		imagetest.LayoutFromDockerArchive(t, imagetest.DockerSave(t, "agentbox/busybox:latest", dir), layout, "v1")
		ref := "oci:" + layout + ":v1"
		t.Cleanup(func() { image.ForgetPath(image.DefaultCache, ref) })
		data := t.TempDir()
		src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
		d := startDaemon(t, data)
		defer d.stop(t)
		cleanupAll(t, data)
		out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
		if code != 0 {
			t.Fatalf("ws create: %s %s", out, errOut)
		}
		ws := oneJSON(t, out)["id"].(string)
		if out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--backend", backend, "--image", ref); code != 0 {
			t.Fatalf("sandbox create --image %s: %s %s", ref, out, errOut)
		}
		out, errOut, code = runCLI(t, data, "", "exec", ws, "--", "sh", "-c", "cat hello.txt; id -u; pwd")
		if code != 0 || out != "hello from the repo\n1000\n/workspace\n" {
			t.Errorf("exec: exit %d stdout %q stderr %q", code, out, errOut)
		}
		out, errOut, code = runCLI(t, data, "", "--json", "image", "ls")
		if code != 0 {
			t.Fatalf("image ls: %s %s", out, errOut)
		}
		var ls struct {
			Images []image.Runnable `json:"images"`
		}
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatalf("image ls: %v %s", err, out)
		}
		i := slices.IndexFunc(ls.Images, func(r image.Runnable) bool { return r.Name == ref })
		if i < 0 {
			t.Fatalf("image ls does not list %s", ref)
		}
		if r := ls.Images[i]; !slices.Contains(r.Backends, backend) || r.ID == "" {
			t.Errorf("image ls: %+v", r)
		}
		out, errOut, code = runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
		if code != 0 {
			t.Fatalf("ws create: %s %s", out, errOut)
		}
		ws2 := oneJSON(t, out)["id"].(string)
		_, errOut, code = runCLI(t, data, "", "sandbox", "create", "--ws", ws2, "--backend", backend, "--image", "oci:"+filepath.Join(dir, "missing"))
		if code == 0 || !strings.Contains(errOut, filepath.Join(dir, "missing")) {
			t.Errorf("a missing layout: exit %d %q", code, errOut)
		}
	})
}
