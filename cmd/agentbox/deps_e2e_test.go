package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// isNumber is a tiny npm package with no dependencies, and its real
// integrity (npm view is-number@7.0.0 dist.integrity).
const (
	isNumberSpec      = "npm:is-number@7.0.0"
	isNumberIntegrity = "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng=="
	npmRegistry       = "registry.npmjs.org"
)

// depsConfig writes a daemon configuration approving is-number@7.0.0
// from the npm registry, with allow (if any) as the registry's resolve
// allowance.
func depsConfig(t *testing.T, allow []string) string {
	t.Helper()
	cfg := fmt.Sprintf("dependencies:\n  approved:\n    - {ecosystem: npm, name: is-number, version: 7.0.0, integrity: %q, source: \"https://%s\"}\n", isNumberIntegrity, npmRegistry)
	if len(allow) > 0 {
		b, _ := json.Marshal(allow)
		cfg += fmt.Sprintf("egress:\n  resolve_allow:\n    - {host: %s, addresses: %s}\n", npmRegistry, b)
	}
	file := filepath.Join(t.TempDir(), "agentbox.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestDependencies: through the CLI against a real daemon, a package
// the manifest does not approve (or asks for a range) is denied with the
// reason and recorded; is-number@7.0.0 comes from the real npm registry
// through the operator's resolve allowance (the registry's name resolves
// to a documentation-range address on this network and in CI, which the
// egress checks refuse without it) and is installed offline in a docker
// sandbox running the tools image, which has no network.
func TestDependencies(t *testing.T) {
	ctx := t.Context()
	lookup, cancel := context.WithTimeout(ctx, 10*time.Second)
	addrs, err := net.DefaultResolver.LookupNetIP(lookup, "ip", npmRegistry)
	cancel()
	if err != nil || len(addrs) == 0 {
		skip.OrFail(t, fmt.Sprintf("%s does not resolve here: %v", npmRegistry, err))
	}
	var allow []string
	for _, a := range addrs {
		allow = append(allow, a.Unmap().String())
	}

	// Without the allowance: the manifest admits is-number, yet the
	// registry's address is refused by the egress checks (when it is an
	// internal one, as here and in CI).
	data := t.TempDir()
	d := startDaemon(t, data, "--config", depsConfig(t, nil))
	cleanupAll(t, data)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			d.stop(t)
		}
	})
	ok := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d\n%s\n%s\n%s", args, code, out, errOut, d.logs)
		}
		return oneJSON(t, out)
	}
	ws := ok("ws", "create", "--empty", "--task", "deps")["id"].(string)
	internal := false
	for _, a := range addrs {
		a = a.Unmap()
		internal = internal || a.IsPrivate() || a.IsLoopback() || strings.HasPrefix(a.String(), "192.0.2.") || strings.HasPrefix(a.String(), "198.51.100.") || strings.HasPrefix(a.String(), "203.0.113.")
	}
	if internal {
		out, errOut, code := runCLI(t, data, "", "ws", "deps", "add", ws, isNumberSpec)
		if code == 0 || !strings.Contains(errOut, "forbidden address") {
			t.Errorf("without the allowance: exit %d %q %q, want the egress checks' refusal", code, out, errOut)
		}
	}
	d.stop(t)
	stopped = true

	d = startDaemon(t, data, "--config", depsConfig(t, allow))
	stopped = false

	// Denials, each with its reason, nothing written.
	for _, tt := range []struct{ spec, want string }{
		{"npm:left-pad@1.3.0", "dependency npm:left-pad@1.3.0 denied: npm package left-pad is not in the approved manifest"},
		{"npm:is-number@^7.0.0", `dependency npm:is-number@^7.0.0 denied: version "^7.0.0" is not pinned`},
		{"npm:is-number@latest", `dependency npm:is-number@latest denied: version "latest" is not pinned`},
		{"npm:is-number@6.0.0", "dependency npm:is-number@6.0.0 denied: version 6.0.0 is not approved (approved: 7.0.0)"},
	} {
		out, errOut, code := runCLI(t, data, "", "--json", "ws", "deps", "add", ws, tt.spec)
		var doc struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal([]byte(out), &doc)
		if code != 1 || doc.Error.Code != "policy_denied" || !strings.Contains(doc.Error.Message, tt.want) {
			t.Errorf("ws deps add %s: exit %d %q %q, want policy_denied: %s", tt.spec, code, out, errOut, tt.want)
		}
	}

	// Admitted from the real registry, through the allowance.
	doc := ok("ws", "deps", "add", ws, isNumberSpec)
	adm, _ := doc["admitted"].([]any)
	if len(adm) != 1 {
		t.Fatalf("ws deps add: %v", doc)
	}
	dep := adm[0].(map[string]any)
	if dep["path"] != ".agentbox/deps/is-number-7.0.0.tgz" || dep["integrity"] != isNumberIntegrity || dep["url"] != "https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz" {
		t.Errorf("admitted: %v", dep)
	}
	if !strings.Contains(d.logs.String(), `"msg":"egress resolve allowance used"`) && internal {
		t.Errorf("the daemon did not log the allowance's use:\n%s", d.logs)
	}
	// The daemon's dial to the registry is in the event log as its own,
	// beside the sandboxes' decisions (committed in batches, so polled).
	daemonDial := func() bool {
		for _, e := range ok("events", "--type", "egress.allowed")["events"].([]any) {
			ev := e.(map[string]any)
			detail, _ := ev["detail"].(string)
			if ev["actor"] == "daemon" && strings.Contains(detail, `"for":"dependencies"`) && strings.Contains(detail, `"host":"`+npmRegistry+`"`) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !daemonDial(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no egress.allowed event of the daemon's dial to %s:\n%v", npmRegistry, ok("events", "--type", "egress.allowed"))
			break
		}
	}

	// Installed offline in a docker sandbox of the tools image.
	ok("sandbox", "create", "--ws", ws, "--backend", "docker", "--image", "agentbox/debian:tools")
	out, errOut, code := runCLI(t, data, "", "exec", ws, "--env", "HOME=/tmp", "--env", "npm_config_cache=/tmp/npm-cache", "--sh",
		"( "+dep["install"].(string)+" ) >/dev/null && node -e 'const n = require(\"is-number\"); console.log(n(5), n(\"x\"))'"+
			" && node -e 'require(\"https\").get(\"https://registry.npmjs.org/\", () => console.log(\"REACHED\")).on(\"error\", e => console.log(\"offline\"))'")
	if code != 0 || out != "true false\noffline\n" {
		t.Errorf("installing in the sandbox: exit %d %q %q", code, out, errOut)
	}

	// The event log has both outcomes, with the package and the reason.
	cl := d.client(t)
	denied, err := cl.Events(ctx, client.EventFilter{Workspace: ws, Type: "dependency.denied"})
	if err != nil {
		t.Fatal(err)
	}
	admitted, err := cl.Events(ctx, client.EventFilter{Workspace: ws, Type: "dependency.admitted"})
	if err != nil {
		t.Fatal(err)
	}
	wantDenied := 4
	if internal {
		wantDenied = 5 // the first daemon's, refused by the egress checks
	}
	if len(denied) != wantDenied || len(admitted) != 1 {
		t.Fatalf("events: %d denied, %d admitted; want %d and 1", len(denied), len(admitted), wantDenied)
	}
	if det := admitted[0].Detail; !strings.Contains(det, `"digest":"`+isNumberIntegrity+`"`) || !strings.Contains(det, `"name":"is-number"`) {
		t.Errorf("admitted event: %s", det)
	}
	var all strings.Builder
	for _, e := range denied {
		all.WriteString(e.Detail + "\n")
	}
	for _, want := range []string{`"name":"left-pad"`, `not in the approved manifest`, `is not pinned`, `"version":"6.0.0"`} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("denied events lack %s:\n%s", want, all.String())
		}
	}
}

// depsScript asks for a range first; the denial's reason must reach
// the debugger and the coder's next turn, which then fixes the bug
// without the package.
const depsScript = `
planner:
  - calls: [{name: submit_plan, args: {files: [calc.py], approach: "fix add", test: "python3 -m pytest -q"}}]
coder:
  - calls:
      - {name: add_dependency, args: {spec: "npm:left-pad@^1.3.0"}}
      - {name: edit_file, args: {path: calc.py, old: "return a - b", new: "return b - a"}}
  - expect: ["dependency npm:left-pad@^1.3.0 denied: version", "is not pinned: a range or a tag"]
    calls: [{name: edit_file, args: {path: calc.py, old: "return a - b", new: "return a + b"}}]
debugger:
  - expect: ["is not pinned"]
    calls: [{name: submit_diagnosis, args: {hypothesis: "the package was asked for as a range and denied", fix: "fix add without a package"}}]
`

// TestSolveDependencyDenied is the agent loop's "denied dependency":
// the scripted coder asks for an unpinned package, the daemon denies it
// against its manifest and records it, and the reason reaches the model,
// whose next patch passes.
func TestSolveDependencyDenied(t *testing.T) {
	requireDebianImage(t)
	data := t.TempDir()
	src := seededCalcRepo(t, false)
	script := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(script, []byte(depsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, data, "--config", depsConfig(t, nil))
	defer d.stop(t)
	cleanupAll(t, data)
	out, errOut, code := runCLI(t, data, "", "--json", "solve", "--repo", src.Dir, "--task", "add(2, 3) returns -1; it should return 5",
		"--test", "python3 -m pytest -q", "--model", "scripted:"+script)
	if code != 0 {
		t.Fatalf("solve: exit %d\n%s\n%s\n%s", code, out, errOut, d.logs)
	}
	var rep solveReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("solve --json: %v\n%s", err, out)
	}
	if len(rep.Run.Attempts) != 1 || !strings.HasPrefix(rep.Run.Attempts[0].Stop, "passed") || rep.Run.Attempts[0].Iterations != 2 {
		t.Fatalf("run %+v", rep.Run)
	}
	ws := rep.Run.Attempts[0].Workspace
	evs, err := d.client(t).Events(t.Context(), client.EventFilter{Workspace: ws, Type: "dependency.denied"})
	if err != nil || len(evs) != 1 || !strings.Contains(evs[0].Detail, `"name":"left-pad"`) || !strings.Contains(evs[0].Detail, "is not pinned") {
		t.Errorf("denied events of %s: %v %+v", ws, err, evs)
	}
	if _, errOut, code := runCLI(t, data, "", "files", "read", ws, ".agentbox/deps/left-pad-1.3.0.tgz"); code == 0 {
		t.Errorf("the denied package is in the workspace: %s", errOut)
	}
}
