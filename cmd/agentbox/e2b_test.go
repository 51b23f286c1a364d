package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestE2BEnv checks `agentbox e2b env`: the three variables from the
// daemon's configuration, as lines or one JSON object with exactly those
// keys, and a clear error when no E2B endpoint is configured.
func TestE2BEnv(t *testing.T) {
	t.Setenv("AGENTBOX_CONFIG", "")
	t.Setenv("AGENTBOX_TOKEN", "e2b-env-token-0123456789")
	t.Setenv("AGENTBOX_E2B_LISTEN", "tcp://0.0.0.0:3000")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"e2b", "env", "--json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("e2b env --json: exit %d: %s", code, errb.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"E2B_API_URL": "http://127.0.0.1:3000", "E2B_SANDBOX_URL": "http://127.0.0.1:3000", "E2B_API_KEY": "e2b-env-token-0123456789"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("e2b env --json (-want +got):\n%s", d)
	}
	out.Reset()
	t.Setenv("AGENTBOX_E2B_LISTEN", "tcp://[::1]:3001")
	if code := run(context.Background(), []string{"e2b", "env"}, nil, &out, &errb); code != 0 {
		t.Fatalf("e2b env: exit %d: %s", code, errb.String())
	}
	if want := "E2B_API_URL=http://[::1]:3001\nE2B_SANDBOX_URL=http://[::1]:3001\nE2B_API_KEY=e2b-env-token-0123456789\n"; out.String() != want {
		t.Errorf("e2b env:\n%s\nwant\n%s", out.String(), want)
	}
	for _, listen := range []string{"", "tcp://127.0.0.1:0"} {
		t.Setenv("AGENTBOX_E2B_LISTEN", listen)
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), []string{"e2b", "env", "--json"}, nil, &out, &errb); code == 0 || !strings.Contains(out.String()+errb.String(), "e2b_listen") {
			t.Errorf("e2b env with e2b_listen %q: exit %d, %s%s", listen, code, out.String(), errb.String())
		}
	}
}
