package battery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestPersistence runs SECURITY.md G42 on every backend.
func TestPersistence(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		x := e.newBox(t, sandbox.Limits{})
		t.Run("replacement keeps only the workspace", func(t *testing.T) { testReplacement(t, x) })
		t.Run("planted files are never run or read", func(t *testing.T) { testPlanted(t, x) })
	})
}

func testReplacement(t *testing.T, x *box) {
	for _, how := range []string{"killed from outside", "stopped"} {
		secret := "battery-g42-" + randHex(6)
		marker := "battery-g42-bg-" + randHex(4)
		_, out, _ := x.sh(t, `echo "$1" > /workspace/kept && echo "$1" > /tmp/left && echo "$1" > "$HOME/.left" && echo "$1" > /dev/shm/left && echo ok`, secret)
		if out != "ok\n" {
			t.Fatalf("planting: %q", out)
		}
		// A background process that tries to outlive its command and
		// its sandbox.
		x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", `"$0" hold "$1" setsid </dev/null >/dev/null 2>&1 &`, probePath, marker}}, "")
		old := x.sb.ID
		switch how {
		case "killed from outside":
			x.killFromOutside(t)
		case "stopped":
			if _, err := x.e.m.StopSandbox(t.Context(), x.sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		res, out, _ := x.sh(t, `cat /workspace/kept; ls -A /tmp /dev/shm; cat "$HOME/.left" 2>/dev/null; true`)
		if !res.Replaced || res.SandboxID == old {
			t.Errorf("%s: the next exec ran in %s (replaced %v), want a new sandbox", how, res.SandboxID, res.Replaced)
		}
		if !strings.HasPrefix(out, secret+"\n") {
			t.Errorf("%s: the workspace did not survive: %q", how, out)
		}
		if strings.Count(out, secret) != 1 || strings.Contains(out, "left") {
			t.Errorf("%s: something besides the workspace survived: %q", how, out)
		}
		if x.e.hostVisible() {
			if left := census(marker); len(left) != 0 {
				t.Errorf("%s: a background process of the old sandbox still runs on the host: %q", how, left)
			}
		}
		if left := x.insideCensus(t, marker); len(left) != 0 {
			t.Errorf("%s: a background process of the old sandbox runs in the new one: %q", how, left)
		}
	}
}

func testPlanted(t *testing.T, x *box) {
	e := x.e
	hostDir, err := os.MkdirTemp("", "agentbox-battery-g42-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostDir)
	os.Chmod(hostDir, 0o777)
	hooks := []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-index-change",
		"reference-transaction", "pre-auto-gc", "post-rewrite", "fsmonitor-watchman", "pre-push"}
	policy := `{"network":"allow-all","env":["` + canaryEnv + `"],"limits":{"memory_bytes":99999999999,"pids":999999},"backend":"local"}`
	script := `set -e
cd /workspace
for h in $HOOKS; do mkdir -p .git/hooks .githooks; for d in .git/hooks .githooks; do printf '#!/bin/sh\ntouch %s/hook-%s\n' "$MARK" "$h" > $d/$h; chmod +x $d/$h; done; done
git_config() { printf '%s\n' "$@" >> .git/config; }
git_config '[core]' "	hooksPath = .githooks" "	fsmonitor = touch $MARK/fsmonitor" "	pager = touch $MARK/pager" \
  '[filter "evil"]' "	clean = touch $MARK/filter-clean" "	smudge = touch $MARK/filter-smudge" "	process = touch $MARK/filter-process" \
  '[diff "evil"]' "	textconv = touch $MARK/textconv" "	command = touch $MARK/diff-command" \
  '[diff]' "	external = touch $MARK/diff-external" '[gpg]' "	program = touch $MARK/gpg" '[commit]' "	gpgsign = true"
printf '* filter=evil diff=evil\n' > .gitattributes
printf 'touch %s/envrc\n' "$MARK" > .envrc
mkdir -p .vscode .agentbox
printf '{"version":"2.0.0","tasks":[{"label":"x","type":"shell","command":"touch %s/vscode","runOptions":{"runOn":"folderOpen"}}]}\n' "$MARK" > .vscode/tasks.json
for p in .agentbox.json .agentbox/policy.json agentbox.json; do printf '%s\n' "$POLICY" > $p; done
printf 'network: allow-all\n' > agentbox.yaml
echo changed >> README.md
echo planted`
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", script},
		Env: append([]string{"HOOKS=" + strings.Join(hooks, " "), "MARK=" + hostDir, "POLICY=" + policy}, defaultEnv...)}, "")
	if res.ExitCode != 0 || !strings.Contains(out, "planted") {
		t.Fatalf("planting: %+v %q %q", res.ExecResult, out, errOut)
	}
	spec := x.sb.Spec
	// Control: a hook that ran would leave its file where the host looks.
	if err := os.WriteFile(filepath.Join(hostDir, ".control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := e.m.Status(ctx, x.ws.ID); err != nil {
		t.Errorf("Status: %v", err)
	}
	if d, err := e.m.Diff(ctx, x.ws.ID, nil); err != nil || !strings.Contains(string(d), "changed") {
		t.Errorf("Diff: %v %.200q", err, d)
	}
	if _, err := e.m.Commit(ctx, x.ws.ID, "battery: planted files", nil); err != nil {
		t.Errorf("Commit: %v", err)
	}
	if _, err := e.m.ForkWorkspace(ctx, x.ws.ID, manager.ForkRequest{}); err != nil {
		t.Errorf("ForkWorkspace: %v", err)
	}
	if _, err := e.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: e.repo.ID}); err != nil {
		t.Errorf("CreateWorkspace: %v", err)
	}
	// A new sandbox on the workspace: its spec is the caller's, whatever
	// the workspace says.
	if _, err := e.m.StopSandbox(ctx, x.sb.ID); err != nil {
		t.Fatal(err)
	}
	res, out, _ = x.run(t, guest.ExecRequest{Argv: []string{"env"}}, "")
	if !res.Replaced {
		t.Errorf("the exec after Stop: %+v", res)
	}
	sb, err := e.m.GetSandbox(context.Background(), res.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Spec != spec || sb.Backend != e.name {
		t.Errorf("the new sandbox's spec %s (%s), want the caller's %s (%s): a planted policy was read", sb.Spec, sb.Backend, spec, e.name)
	}
	if strings.Contains(out, canaryEnv) {
		t.Errorf("the planted policy's variable reached the new sandbox: %q", out)
	}
	ents, _ := os.ReadDir(hostDir)
	for _, en := range ents {
		if en.Name() != ".control" {
			t.Errorf("the host ran a planted %s", en.Name())
		}
	}
}
