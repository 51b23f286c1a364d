package battery

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/image/imagetest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// pathImages are the busybox image named by path three ways, and two
// images made from it as OCI layouts with a USER and WORKDIR of their own.
type pathImages struct {
	archive, layout, ociArchive string
	// sameUID's USER "app" has the sandbox uid and a home under /tmp;
	// its WORKDIR is /opt/wd.
	sameUID string
	// otherUID's USER is 2001:2001 ("other", home /home/other on the
	// read-only root); its WORKDIR is /workspace.
	otherUID string
	// corrupt is an OCI layout whose one layer does not match its digest;
	// corruptID its image id.
	corrupt, corruptID string
	// ghost's USER is a name its passwd lacks.
	ghost string
	// mark is the content of /opt/wd/marker in both.
	mark string
}

func makePathImages(t *testing.T) pathImages {
	t.Helper()
	dir := t.TempDir()
	var p pathImages
	p.archive = imagetest.DockerSave(t, testImage, dir)
	layout := filepath.Join(dir, "layout")
	imagetest.LayoutFromDockerArchive(t, p.archive, layout, "v1")
	p.ociArchive = filepath.Join(dir, "oci.tar")
	imagetest.TarDir(t, layout, p.ociArchive)
	p.layout = layout
	// The backends record what they ran in the machine-wide cache.
	t.Cleanup(func() {
		for _, ref := range []string{"docker-archive:" + p.archive, "oci:" + layout + ":v1", "oci-archive:" + p.ociArchive, p.sameUID, p.otherUID, p.ghost, p.corrupt} {
			image.ForgetPath(image.DefaultCache, ref)
		}
	})

	passwd, err := exec.Command("docker", "run", "--rm", "--network", "none", testImage, "cat", "/etc/passwd").Output()
	if err != nil {
		t.Fatalf("reading the busybox passwd: %v", err)
	}
	group, _ := exec.Command("docker", "run", "--rm", "--network", "none", testImage, "cat", "/etc/group").Output()
	base := layerTars(t, p.archive)
	mark := make([]byte, 4)
	rand.Read(mark)
	p.mark = hex.EncodeToString(mark)
	mk := func(name, user, workdir, extraPasswd, extraGroup string) string {
		top := imagetest.Layer(t,
			imagetest.Entry{Name: "etc/passwd", Body: string(passwd) + extraPasswd},
			imagetest.Entry{Name: "etc/group", Body: string(group) + extraGroup},
			imagetest.Entry{Name: "opt/wd/", Type: '5'},
			imagetest.Entry{Name: "opt/wd/marker", Body: hex.EncodeToString(mark)},
		)
		layers := append(append([][]byte{}, base...), top)
		var diffIDs []string
		for _, l := range layers {
			diffIDs = append(diffIDs, imagetest.Digest(l))
		}
		config, _ := json.Marshal(map[string]any{
			"os": "linux", "architecture": runtime.GOARCH,
			"config": map[string]any{"Env": []string{"PATH=/bin:/usr/bin", "MARK=" + hex.EncodeToString(mark)}, "User": user, "WorkingDir": workdir},
			"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
		})
		d := filepath.Join(dir, name)
		id := imagetest.WriteLayout(t, d, "", config, layers, true)
		t.Cleanup(func() {
			exec.Command("docker", "rmi", "-f", id).Run()
			os.RemoveAll(filepath.Join(image.DefaultCache, strings.TrimPrefix(id, "sha256:")))
		})
		return "oci:" + d
	}
	p.sameUID = mk("same", "app", "/opt/wd", "app:x:1000:1000::/tmp/apphome:/bin/sh\n", "")
	corrupt := filepath.Join(dir, "corrupt")
	p.corruptID = imagetest.WriteLayout(t, corrupt, "", nil, [][]byte{imagetest.Layer(t, imagetest.Entry{Name: "bin/x", Body: "original"})}, false)
	blobs, _ := filepath.Glob(filepath.Join(corrupt, "blobs/sha256/*"))
	for _, b := range blobs {
		data, _ := os.ReadFile(b)
		if i := strings.Index(string(data), "original"); i >= 0 {
			data[i] = 'O'
			os.WriteFile(b, data, 0o644)
		}
	}
	p.corrupt = "oci:" + corrupt
	p.ghost = mk("ghost", "ghost", "", "", "")
	p.otherUID = mk("other", "other:other", "/workspace", "other:x:2001:2001::/home/other:/bin/sh\n", "other:x:2001:\n")
	return p
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

// TestPathImagesAndUser runs commands on every backend from images named by
// path (a `docker save` archive, an OCI layout, an OCI archive), and checks
// that an image's WORKDIR and USER come out the same on each: commands run
// as the sandbox uid always, start in the WORKDIR, and get the USER's name
// and, where writable, its home.
func TestPathImagesAndUser(t *testing.T) {
	requireSetup(t)
	requireEngine(t, "runc")
	imgs := makePathImages(t)
	forEachBackend(t, func(t *testing.T, e *env) {
		exec1 := func(t *testing.T, img, script string) string {
			t.Helper()
			w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "path image"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Image: img}); err != nil {
				t.Fatalf("CreateSandbox %s on %s: %v", img, e.name, err)
			}
			var out, errOut syncBuffer
			res, err := e.m.Exec(t.Context(), w.ID, guest.ExecRequest{Argv: []string{"sh", "-c", script}, Timeout: time.Minute}, nil, &out, &errOut)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%s on %s: %v %+v\n%s%s", img, e.name, err, res, out.String(), errOut.String())
			}
			return strings.TrimSpace(out.String())
		}
		for _, ref := range []string{"docker-archive:" + imgs.archive, "oci:" + imgs.layout + ":v1", "oci-archive:" + imgs.ociArchive} {
			t.Run(strings.SplitN(ref, ":", 2)[0], func(t *testing.T) {
				want := "1000 /workspace " + sandbox.DefaultHome + " -"
				if got := exec1(t, ref, `echo "$(id -u) $(pwd) $HOME ${USER:--}"`); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			})
		}
		t.Run("same-uid", func(t *testing.T) {
			got := exec1(t, imgs.sameUID, `echo "$(id -u):$(id -g) $(pwd) $HOME $USER $LOGNAME $(cat marker)"; touch /workspace/written && mkdir -p "$HOME/.cache" && echo ok`)
			want := "1000:1000 /opt/wd /tmp/apphome app app " + imgs.mark + "\nok"
			if got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
		t.Run("bad", func(t *testing.T) {
			w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "ghost user"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Image: imgs.ghost}); err == nil || !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), `no user "ghost" in the image's /etc/passwd`) {
				t.Errorf("an image whose USER its passwd lacks: %v", err)
			}
			for _, ref := range []string{imgs.corrupt, "oci:" + filepath.Join(t.TempDir(), "missing"), "docker-archive:" + imgs.layout} {
				w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "bad path image"})
				if err != nil {
					t.Fatal(err)
				}
				path := strings.SplitN(ref, ":", 2)[1]
				_, err = e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Image: ref})
				if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("%s: %v, want an invalid error naming %s", ref, err, path)
				}
				if sbs, _ := e.st.ListSandboxes(t.Context(), store.SandboxFilter{WorkspaceID: w.ID}); len(sbs) != 0 {
					for _, sb := range sbs {
						if sb.State == string(sandbox.StateRunning) {
							t.Errorf("%s: a sandbox is running: %+v", ref, sb)
						}
					}
				}
			}
			if err := exec.Command("docker", "image", "inspect", imgs.corruptID).Run(); err == nil {
				t.Errorf("the corrupt image is in the engine")
			}
			if _, err := os.Stat(filepath.Join(image.DefaultCache, strings.TrimPrefix(imgs.corruptID, "sha256:"))); err == nil {
				t.Errorf("the corrupt image is in the cache")
			}
		})
		t.Run("other-uid", func(t *testing.T) {
			got := exec1(t, imgs.otherUID, `echo "$(id -u):$(id -g) $(pwd) $HOME $USER $LOGNAME"; touch /workspace/written && echo ok`)
			want := "1000:1000 /workspace " + sandbox.DefaultHome + " other other\nok"
			if got != want {
				t.Errorf("got %q, want %q (commands keep the sandbox uid; the image user's name, and no unwritable home)", got, want)
			}
		})
	})
}
