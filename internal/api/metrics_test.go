package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/telemetry"
)

// TestMetricsEndpoint checks that GET /metrics serves the daemon's metrics
// behind the same bearer token as the rest of the API.
func TestMetricsEndpoint(t *testing.T) {
	data := t.TempDir()
	st, err := sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := manager.New(t.Context(), st, manager.Config{DataDir: data, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	met := telemetry.New(telemetry.Options{
		Backends: []string{"docker"},
		Sandboxes: func(context.Context) (map[telemetry.SandboxKey]int, error) {
			return map[telemetry.SandboxKey]int{{"running", "docker"}: 1}, nil
		},
	})
	met.ObserveExec("docker", 10*time.Millisecond, manager.OutcomeNonZero)
	const token = "s3cret"
	srv := httptest.NewServer(api.New(m, api.Options{Token: token, Metrics: met.Handler()}))
	t.Cleanup(srv.Close)

	get := func(auth string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}

	tests := []struct {
		name, auth string
		status     int
		want       []string
	}{
		{"no token", "", http.StatusUnauthorized, []string{`"unauthorized"`}},
		{"wrong token", "nope", http.StatusUnauthorized, []string{`"unauthorized"`}},
		{"token", token, http.StatusOK, []string{
			`agentbox_sandboxes{backend="docker",state="running"} 1`,
			`agentbox_execs_total{backend="docker",outcome="nonzero"} 1`,
			`agentbox_exec_seconds_bucket{backend="docker",le="0.01"} 1`,
			"# TYPE agentbox_sandbox_create_seconds histogram",
			"# TYPE agentbox_egress_decisions_total counter",
			"process_start_time_seconds",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, ctype, body := get(tt.auth)
			if status != tt.status {
				t.Fatalf("status = %d, want %d: %s", status, tt.status, body)
			}
			if status == http.StatusOK && !strings.HasPrefix(ctype, "text/plain") {
				t.Errorf("Content-Type = %q, want text/plain", ctype)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q", w)
				}
			}
		})
	}
}

// TestMetricsDisabled: a server given no metrics answers 404, not the
// catch-all "no API route".
func TestMetricsDisabled(t *testing.T) {
	f := newFixture(t, "")
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "serves no metrics") {
		t.Errorf("GET /metrics = %d %s", resp.StatusCode, body)
	}
}
