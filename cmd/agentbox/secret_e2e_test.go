package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSecretsThroughTheCLI: a secret goes in on stdin and never comes out:
// not from ls, not in the event log, the daemon's log or the database
// files; a bad name or value is refused and stores nothing; and a result
// that carries a stored value fails the diff check.
func TestSecretsThroughTheCLI(t *testing.T) {
	data := t.TempDir()
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	const value = "s3cr3t-canary-value-0123456789"
	cli := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, data, stdin, args...)
	}
	if out, errOut, code := cli(value+"\n", "--json", "secret", "set", "DEPLOY_TOKEN"); code != 0 || !strings.Contains(out, `"set": true`) {
		t.Fatalf("secret set: exit %d %s %s", code, out, errOut)
	}
	for _, bad := range []struct{ name, value, want string }{
		{"deploy_token", "x", "upper case"},
		{"HTTPS_PROXY", "x", "agentbox sets"},
		{"OTHER", "a\r\nb", "line break"},
		{"OTHER", "", "no value"},
	} {
		out, errOut, code := cli(bad.value, "secret", "set", bad.name)
		if code == 0 || !strings.Contains(out+errOut, bad.want) {
			t.Errorf("secret set %s: exit %d %s%s, want a refusal naming %q", bad.name, code, out, errOut, bad.want)
		}
	}
	out, _, code := cli("", "--json", "secret", "ls")
	if code != 0 || !strings.Contains(out, `"name": "DEPLOY_TOKEN"`) || strings.Contains(out, "OTHER") {
		t.Errorf("secret ls: %s", out)
	}
	events, _, _ := cli("", "--json", "events", "--type", "secret.set")
	if !strings.Contains(events, "DEPLOY_TOKEN") {
		t.Errorf("no secret.set event: %s", events)
	}

	// A result carrying the value fails the check, which does not repeat it.
	src := testutil.NewRepo(t, map[string]string{"a.txt": "a\n"})
	out, errOut, code := cli("", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	cli("token = "+value+"\n", "files", "write", ws, "config.ini")
	out, errOut, code = cli("", "--json", "ws", "diff", ws, "--check")
	if code != 1 || !strings.Contains(out, "known-secret") || strings.Contains(out+errOut, value) {
		t.Errorf("ws diff --check with a stored secret in the result: exit %d %s %s", code, out, errOut)
	}

	// The value is nowhere the host keeps records, but sealed.
	for _, e := range []string{out, events, d.logs.String()} {
		if strings.Contains(e, value) {
			t.Errorf("the secret's value shows in output or logs")
		}
	}
	files, _ := filepath.Glob(filepath.Join(data, "agentbox.db*"))
	for _, f := range files {
		if raw, _ := os.ReadFile(f); strings.Contains(string(raw), value) {
			t.Errorf("%s holds the secret in clear", f)
		}
	}
	// Row by row too, which is what there is to look at on PostgreSQL.
	st := openDataStore(t, data)
	dump, err := st.Dump(t.Context())
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for table, rows := range dump {
		for _, r := range rows {
			if strings.Contains(r, value) || strings.Contains(r, hex.EncodeToString([]byte(value))) {
				t.Errorf("table %s holds the secret in clear", table)
			}
		}
	}
	if out, errOut, code := cli("", "secret", "rm", "DEPLOY_TOKEN"); code != 0 {
		t.Errorf("secret rm: %s %s", out, errOut)
	}
	if out, _, _ := cli("", "--json", "secret", "ls"); strings.Contains(out, "DEPLOY_TOKEN") {
		t.Errorf("the secret is still listed after rm: %s", out)
	}
	if _, errOut, code := cli("", "secret", "rm", "DEPLOY_TOKEN"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("second rm: exit %d %s", code, errOut)
	}
}
