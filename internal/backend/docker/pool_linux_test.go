package docker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestPoolPointPropagation checks the mechanism the warm pool stands on,
// per runtime, with the docker CLI as the oracle: a container started with
// the pool point at /workspace (rslave) sees a workspace attached after its
// start, nosuid,nodev, under runc; under runsc it does not (its gofer
// serves the directory it opened at the start), which is why the gvisor
// backend refuses CreateDetached. If a runsc upgrade starts to show the
// mount, this test fails: the gvisor backend could then pool too.
func TestPoolPointPropagation(t *testing.T) {
	for _, f := range flavours {
		t.Run(f.name, func(t *testing.T) {
			b := newBackend(t, f.name, f.runtime)
			id := "pooltest-" + randomID(t)
			p, release, err := b.poolPoint(id)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := release(); err != nil {
					t.Error(err)
				}
			}()
			name := containerName(id)
			out, err := exec.Command("docker", "run", "-d", "--rm", "--name", name, "--runtime", f.runtime, "--network", "none",
				"--label", sandbox.LabelSandbox+"="+id,
				"--mount", "type=bind,src="+p+",dst=/workspace,bind-propagation=rslave", testImage, "sleep", "120").CombinedOutput()
			if err != nil {
				t.Fatalf("docker run: %v: %s", err, out)
			}
			defer exec.Command("docker", "rm", "-f", name).Run()
			ws := t.TempDir()
			if err := os.WriteFile(filepath.Join(ws, "attached.txt"), []byte("yes\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			info := sandbox.Info{ID: id, Ref: name}
			err = b.Attach(t.Context(), info, ws)
			if f.runtime == RuntimeRunsc {
				if !errors.Is(err, sandbox.ErrNoAttach) {
					t.Errorf("gvisor Attach = %v, want ErrNoAttach", err)
				}
				err = b.attach(id, ws) // the mechanism itself, to show it fails
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Attach(t.Context(), info, ws); err == nil {
				t.Error("a second attach succeeded")
			}
			// The pool point, under the workspace, shows no host path
			// (SECURITY.md H45).
			under, err := exec.Command("docker", "exec", name, "sh", "-c", "grep ' /workspace ' /proc/self/mountinfo | head -n 1").CombinedOutput()
			if f := strings.Fields(string(under)); err != nil || len(f) < 5 || f[3] != "/" || strings.Contains(string(under), b.mountDir) {
				t.Errorf("the pool point inside: %q, %v", under, err)
			}
			out, err = exec.Command("docker", "exec", name, "sh", "-c", "ls -A /workspace; grep ' /workspace ' /proc/self/mountinfo | tail -n 1").CombinedOutput()
			if err != nil {
				t.Fatalf("docker exec: %v: %s", err, out)
			}
			list, mnt, _ := strings.Cut(string(out), "\n")
			switch f.runtime {
			case RuntimeRunc:
				if list != "attached.txt" || !strings.Contains(mnt, "nosuid") || !strings.Contains(mnt, "nodev") {
					t.Errorf("runc: /workspace after attach: %q", out)
				}
			case RuntimeRunsc:
				if list == "attached.txt" {
					t.Errorf("runsc now sees a mount attached after the start (%q): the gvisor backend could pool", out)
				}
			}
		})
	}
}

func TestGVisorCreateDetachedRefused(t *testing.T) {
	b := newBackend(t, NameGVisor, RuntimeRunsc)
	_, err := b.CreateDetached(t.Context(), sandbox.CreateRequest{ID: "pooltest-" + randomID(t)}, "owner")
	if !errors.Is(err, sandbox.ErrNoAttach) {
		t.Fatalf("CreateDetached on gvisor = %v, want ErrNoAttach", err)
	}
}

func randomID(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}
