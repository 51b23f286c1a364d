package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSandboxPolicyThroughTheCLI: a policy given with --policy and --allow
// reaches the sandbox through the API (its commands find the proxy), a bad
// one is refused with the field named and creates nothing, and a field
// this daemon cannot enforce yet is refused, not ignored.
func TestSandboxPolicyThroughTheCLI(t *testing.T) {
	data := t.TempDir()
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox, RootfsDir: filepath.Join(data, "images", "busybox", "rootfs"), NoEngine: true}); err != nil {
		t.Fatal(err)
	}
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	create := func(args ...string) (string, string, int) {
		return runCLI(t, data, "", append([]string{"--json", "sandbox", "create", "--ws", ws, "--backend", "local", "--image", "agentbox/busybox:latest"}, args...)...)
	}
	noSandbox := func(why string) {
		t.Helper()
		if out, _, _ := runCLI(t, data, "", "--json", "sandbox", "ls", "--ws", ws); strings.Contains(out, `"sb_`) {
			t.Errorf("%s left a sandbox: %s", why, out)
		}
	}

	// Refused before anything is made, with the field.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow", "*.com"}, "network.allow[0]"},
		{[]string{"--allow", "127.0.0.1"}, "IP addresses are not allowed"},
		{[]string{"--policy", writeTemp(t, "network: {mode: allowlist, allow: [a.test]}\nlimits: {disk: 1G}\n")}, "limits.disk"},
		{[]string{"--policy", writeTemp(t, "network: {mode: allowlist, allow: [a.test]}\nsecrets: {TOKEN: {hosts: [a.test]}}\n")}, "secrets"},
		{[]string{"--policy", writeTemp(t, "network: {mode: none}\nbogus: 1\n")}, "bogus"},
		{[]string{"--policy", writeTemp(t, "limits: {memory: 100G}\n")}, "limits.memory"},
	} {
		out, errOut, code := create(tc.args...)
		if code == 0 || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("sandbox create %v: exit %d, %s%s; want a refusal naming %q", tc.args, code, out, errOut, tc.want)
		}
		noSandbox(strings.Join(tc.args, " "))
	}

	// Accepted: the policy is the sandbox's, and its commands get the
	// proxy and the policy's environment.
	pol := writeTemp(t, "network:\n  mode: allowlist\n  allow: [\"api.example.test:443\"]\nenv:\n  GREETING: from-policy\n")
	out, errOut, code = create("--policy", pol, "--allow", "*.pkg.example.test")
	if code != 0 {
		t.Fatalf("sandbox create with a policy: %s %s", out, errOut)
	}
	if spec := oneJSON(t, out)["spec"].(string); !strings.Contains(spec, `"allow":["api.example.test:443","*.pkg.example.test"]`) {
		t.Errorf("the sandbox's spec does not hold the policy: %s", spec)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws, "--env", "PATH=/bin", "--", "sh", "-c", `echo "$GREETING $HTTPS_PROXY"; test -S /run/agentbox/egress.sock && echo socket`)
	if code != 0 || out != "from-policy http://127.0.0.1:3128\nsocket\n" {
		t.Errorf("exec in a sandbox with a policy: exit %d %q %q", code, out, errOut)
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
