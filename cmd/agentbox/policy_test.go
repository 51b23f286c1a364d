package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/policy"
)

// TestPolicyCheck runs `agentbox policy check`, which needs no daemon:
// a valid policy prints its canonical form (YAML that parses back to the
// same policy, or one JSON document with an id); a bad one exits non-zero
// with one line naming the field.
func TestPolicyCheck(t *testing.T) {
	data := t.TempDir()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "network:\n  mode: allowlist\n  allow: [API.GitHub.com:443, bücher.de]\n" +
		"secrets:\n  GITHUB_TOKEN: {hosts: [api.github.com:443], format: 'Bearer {{value}}'}\n" +
		"env: {CI: 'true'}\nlimits: {memory: 1.5G, exec_timeout: 90}\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if want.Network.Allow[0] != "api.github.com:443" || want.Network.Allow[1] != "xn--bcher-kva.de" {
		t.Fatalf("canonical allow list = %q", want.Network.Allow)
	}

	t.Run("human", func(t *testing.T) {
		out, errOut, code := runCLI(t, data, "", "policy", "check", file)
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		got, err := policy.Parse([]byte(out))
		if err != nil {
			t.Fatalf("the printed policy does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("printed policy (-want +got):\n%s", diff)
		}
	})

	t.Run("json from stdin", func(t *testing.T) {
		out, errOut, code := runCLI(t, data, doc, "--json", "policy", "check", "-")
		if code != 0 {
			t.Fatalf("exit %d\n%s%s", code, out, errOut)
		}
		v := oneJSON(t, out)
		if v["id"] != "policy-check" {
			t.Errorf("id = %v, want policy-check", v["id"])
		}
		b, err := json.Marshal(v["policy"])
		if err != nil {
			t.Fatal(err)
		}
		got, err := policy.Parse(b)
		if err != nil {
			t.Fatalf("the printed policy does not parse: %v\n%s", err, b)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("printed policy (-want +got):\n%s", diff)
		}
	})

	refused := []struct {
		name    string
		doc     string
		wantErr string
	}{
		{"bad wildcard", "network: {mode: allowlist, allow: [a.com, b.com, '*.foo*.com']}\n",
			`agentbox: stdin: network.allow[2] "*.foo*.com": a wildcard must be the whole first label, as in "*.example.com"` + "\n"},
		{"over a ceiling", "limits: {memory: 64G}\n", "agentbox: stdin: limits.memory 64G is over the daemon's ceiling of 8G\n"},
		{"unknown field", "network: {mode: none}\nlimits: {memroy: 1G}\n", "agentbox: stdin: limits.memroy: unknown field"},
		{"reserved variable", "env: {AGENTBOX_X: x}\n", "agentbox: stdin: env.AGENTBOX_X: names starting with AGENTBOX_ are reserved"},
		{"not a policy", "[1, 2]", "agentbox: stdin: policy: want an object, not a list"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, data, tt.doc, "policy", "check", "-")
			if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, tt.wantErr) {
				t.Errorf("exit %d stdout %q stderr %q; want non-zero, one line on stderr starting %q", code, out, errOut, tt.wantErr)
			}
			out, _, code = runCLI(t, data, tt.doc, "--json", "policy", "check", "-")
			e, _ := oneJSON(t, out)["error"].(map[string]any)
			msg, _ := e["message"].(string)
			// The class is the code, not a word at the end of the message.
			want := strings.TrimSuffix(strings.TrimPrefix(tt.wantErr, "agentbox: "), "\n")
			if code == 0 || e["code"] != "invalid" || !strings.HasPrefix(msg, want) || strings.HasSuffix(msg, ": invalid") {
				t.Errorf("--json: exit %d, error %v; want code invalid and a message starting %q", code, e, want)
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.yaml")
		out, errOut, code := runCLI(t, data, "", "policy", "check", missing)
		if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, missing) {
			t.Errorf("exit %d stdout %q stderr %q; want non-zero, one line naming the file", code, out, errOut)
		}
	})
}
