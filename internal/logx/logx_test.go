package logx

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		delete(m, "time")
		out = append(out, m)
	}
	return out
}

func TestHandlerAddsContextIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil)))
	ctx, scope := NewScope(t.Context(), slog.String(KeyRequest, "req_1"))
	ctx = With(ctx, KeyWorkspace, "ws_1")
	inner := With(ctx, KeySandbox, "sb_1", KeyExec, "ex_1", KeyRepo, "")
	log.InfoContext(inner, "exec finished", KeySandbox, "sb_1")
	log.With(KeyWorkspace, "ws_1").InfoContext(ctx, "outer")
	log.InfoContext(With(inner, KeySandbox, "sb_2"), "replaced")
	log.Info("no context")

	want := []map[string]any{
		{"level": "INFO", "msg": "exec finished", "sandbox_id": "sb_1", "request_id": "req_1", "workspace_id": "ws_1", "exec_id": "ex_1"},
		{"level": "INFO", "msg": "outer", "workspace_id": "ws_1", "request_id": "req_1"},
		{"level": "INFO", "msg": "replaced", "request_id": "req_1", "workspace_id": "ws_1", "exec_id": "ex_1", "sandbox_id": "sb_2"},
		{"level": "INFO", "msg": "no context"},
	}
	if d := cmp.Diff(want, lines(t, &buf)); d != "" {
		t.Errorf("log lines (-want +got):\n%s", d)
	}
	// The scope saw every id, the first value of each.
	got := map[string]string{}
	for _, a := range scope.Attrs() {
		got[a.Key] = a.Value.String()
	}
	if d := cmp.Diff(map[string]string{KeyRequest: "req_1", KeyWorkspace: "ws_1", KeySandbox: "sb_1", KeyExec: "ex_1"}, got); d != "" {
		t.Errorf("scope (-want +got):\n%s", d)
	}
	if Get(inner, KeyExec) != "ex_1" || Get(t.Context(), KeyExec) != "" {
		t.Error("Get")
	}
}
