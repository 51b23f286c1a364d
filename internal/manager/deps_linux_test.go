package manager

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/deps/depstest"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// toolsImage has node and npm.
const toolsImage = "agentbox/debian:tools"

// TestDependencyAdmission admits an npm package from a registry the test
// serves (reached through a real egress proxy with production address
// rules and the operator's allowance for the registry's name), installs it
// offline in a real docker sandbox without network, and checks each
// denial writes nothing and is recorded.
func TestDependencyAdmission(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()

	pad := depstest.NPMPackage(t, "pad-it", "1.0.0", map[string]string{"index.js": "module.exports = (s, n) => String(s).padStart(n, '*');\n"})
	tampered := depstest.NPMPackage(t, "tampered", "1.0.0", map[string]string{"index.js": "module.exports = 'good';\n"})
	reg := depstest.NewRegistry(t, pad, tampered)
	reg.ServeTarball("tampered", depstest.NPMPackage(t, "tampered", "1.0.0", map[string]string{"index.js": "module.exports = 'evil';\n"}).Tarball)
	m, err := deps.NewManifest([]deps.Entry{reg.Entry(pad), reg.Entry(tampered)})
	if err != nil {
		t.Fatal(err)
	}
	proxy := depstest.Proxy(t, egress.Options{})
	adm, err := deps.New(deps.Options{Manifest: m, Dial: depstest.Dial(proxy), TempDir: t.TempDir(), RootCAs: reg.Roots()})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	prev := h.configure
	h.configure = func(c *Config) { prev(c); c.Dependencies = adm }
	h.reopen()

	w := h.create(CreateRequest{Repo: h.repo.ID})
	if _, err := h.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Image: toolsImage}); err != nil {
		if strings.Contains(err.Error(), "No such image") || strings.Contains(err.Error(), "not found") {
			t.Fatalf("the tools image %s is needed (scripts/images.sh builds it): %v", toolsImage, err)
		}
		t.Fatal(err)
	}

	dep, err := h.m.AddDependency(ctx, w.ID, "npm:pad-it@1.0.0")
	if err != nil {
		t.Fatalf("AddDependency: %v", err)
	}
	if dep.Path != ".agentbox/deps/pad-it-1.0.0.tgz" || dep.Integrity != pad.Integrity {
		t.Errorf("AddDependency = %+v", dep)
	}
	if got, ok := h.readFile(w.ID, dep.Path); !ok || got != string(pad.Tarball) {
		t.Fatalf("the workspace holds %d bytes at %s, want the package's %d", len(got), dep.Path, len(pad.Tarball))
	}
	if proxy.ResolveAllowanceUses() == 0 {
		t.Error("the fetch did not go through the proxy's checks (no use of the allowance)")
	}

	// Installed offline in the sandbox, which has no network: npm finds
	// everything in the tarball.
	var out, errb strings.Builder
	res, err := h.m.Exec(ctx, w.ID, guest.ExecRequest{
		Argv: []string{"sh", "-c", "cd /workspace && ( " + dep.Install + " ) >/dev/null && node -e 'console.log(require(\"pad-it\")(\"ok\", 5))'" +
			" && node -e 'require(\"https\").get(\"https://registry.npmjs.org/\", () => console.log(\"REACHED\")).on(\"error\", e => console.log(\"offline:\", e.code))'"},
		Env:     []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "npm_config_cache=/tmp/npm-cache"},
		Timeout: 2 * time.Minute,
	}, nil, &out, &errb)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("installing in the sandbox: %+v %v\nstdout:\n%s\nstderr:\n%s", res, err, out.String(), errb.String())
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || lines[0] != "***ok" || !strings.HasPrefix(lines[1], "offline:") {
		t.Errorf("in the sandbox: %q, want the package's output and no network", out.String())
	}
	// The artifact is installed from, not part of the change: no status
	// or diff names it.
	st, err := h.m.Status(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Changes {
		if strings.HasPrefix(c.Path, ".agentbox/") {
			t.Errorf("the workspace's status names the artifact: %+v", c)
		}
	}
	// Nor does a fork's.
	fork, err := h.m.ForkWorkspace(ctx, w.ID, ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = h.m.Status(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Changes {
		if strings.HasPrefix(c.Path, ".agentbox/") {
			t.Errorf("the fork's status names the artifact: %+v", c)
		}
	}

	// Denials: nothing is written, each is recorded with its reason.
	for _, tt := range []struct{ spec, want, path string }{
		{"npm:left-pad@1.3.0", "npm package left-pad is not in the approved manifest", ".agentbox/deps/left-pad-1.3.0.tgz"},
		{"npm:pad-it@^1.0.0", `version "^1.0.0" is not pinned`, ""},
		{"npm:tampered@1.0.0", "digest mismatch", ".agentbox/deps/tampered-1.0.0.tgz"},
	} {
		_, err := h.m.AddDependency(ctx, w.ID, tt.spec)
		if !errors.Is(err, errdefs.ErrPolicyDenied) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("AddDependency(%s) = %v, want denied: %s", tt.spec, err, tt.want)
		}
		if tt.path != "" {
			if _, ok := h.readFile(w.ID, tt.path); ok {
				t.Errorf("AddDependency(%s) was denied, yet %s exists", tt.spec, tt.path)
			}
		}
	}

	// A sandbox that plants a link where the artifact goes gets nothing
	// written through it (SECURITY.md C17): the write is refused or stays
	// inside the workspace, and the host directory stays empty.
	w2 := h.create(CreateRequest{Repo: h.repo.ID})
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(h.files(w2), ".agentbox")); err != nil {
		t.Fatal(err)
	}
	_, err = h.m.AddDependency(ctx, w2.ID, "npm:pad-it@1.0.0")
	t.Logf("AddDependency with .agentbox a link out: %v", err)
	if err == nil {
		if fi, lerr := os.Lstat(filepath.Join(h.files(w2), ".agentbox")); lerr != nil || fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("AddDependency through a planted link succeeded and the link is still there")
		}
	}
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Errorf("AddDependency wrote through a planted link into %s: %v", outside, left)
	}

	admitted := h.events(w.ID, EventDependencyAdmitted)
	denied := h.events(w.ID, EventDependencyDenied)
	if len(admitted) != 1 || len(denied) != 3 {
		t.Fatalf("events: %d admitted, %d denied; want 1 and 3", len(admitted), len(denied))
	}
	var d map[string]any
	json.Unmarshal([]byte(admitted[0].Detail), &d)
	if d["ecosystem"] != "npm" || d["name"] != "pad-it" || d["version"] != "1.0.0" || d["digest"] != pad.Integrity || d["path"] != dep.Path {
		t.Errorf("admitted event detail: %s", admitted[0].Detail)
	}
	var reasons []string
	for _, e := range denied {
		var d map[string]any
		json.Unmarshal([]byte(e.Detail), &d)
		reasons = append(reasons, d["name"].(string)+": "+d["reason"].(string))
	}
	for _, want := range []string{"left-pad: dependency npm:left-pad@1.3.0 denied: npm package left-pad is not in the approved manifest", "pad-it: dependency npm:pad-it@^1.0.0 denied", "tampered: dependency npm:tampered@1.0.0 denied: digest mismatch"} {
		if !strings.Contains(strings.Join(reasons, "\n"), want) {
			t.Errorf("denied events %q lack %q", reasons, want)
		}
	}
}
