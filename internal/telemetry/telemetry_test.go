package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentbox/agentbox/internal/manager"
)

// Metrics is what the daemon hands the manager as its Observer, and its
// warm pool figures are found on it.
var _ manager.PoolObserver = (*Metrics)(nil)

func TestMetricsExposition(t *testing.T) {
	m := New(Options{
		Backends: []string{"docker"},
		Sandboxes: func(context.Context) (map[SandboxKey]int, error) {
			return map[SandboxKey]int{{"running", "docker"}: 2, {"lost", "gvisor"}: 1}, nil
		},
	})
	m.ObserveCreate("docker", 1500*time.Millisecond, nil)
	m.ObserveCreate("docker", time.Millisecond, errors.New("no image"))
	m.ObserveExec("docker", 20*time.Millisecond, "ok")
	m.ObserveExec("docker", 30*time.Millisecond, "ok")
	m.ObserveExec("docker", time.Second, "timeout")
	m.ObserveEgress(true)
	m.ObserveEgress(false)
	m.ObserveEgress(false)
	m.ObservePoolSize("docker", "img", 3)
	m.ObservePoolSize("docker", "img", 2)
	m.ObservePoolClaim("docker", "img", true)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body, _ := io.ReadAll(rec.Body)
	text := string(body)
	for _, want := range []string{
		`agentbox_sandboxes{backend="docker",state="running"} 2`,
		`agentbox_sandboxes{backend="gvisor",state="lost"} 1`,
		`agentbox_sandbox_create_seconds_count{backend="docker"} 1`,
		`agentbox_sandbox_create_errors_total{backend="docker"} 1`,
		`agentbox_exec_seconds_count{backend="docker"} 3`,
		`agentbox_execs_total{backend="docker",outcome="ok"} 2`,
		`agentbox_execs_total{backend="docker",outcome="timeout"} 1`,
		// Declared backends have every outcome from the start.
		`agentbox_execs_total{backend="docker",outcome="oom"} 0`,
		`agentbox_egress_decisions_total{allowed="true"} 1`,
		`agentbox_egress_decisions_total{allowed="false"} 2`,
		`agentbox_warm_pool_ready{backend="docker",image="img"} 2`,
		`agentbox_warm_pool_claims_total{backend="docker",image="img",result="hit"} 1`,
		`agentbox_warm_pool_claims_total{backend="docker",image="img",result="miss"} 0`,
		"go_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("Content-Type = %q", rec.Header().Get("Content-Type"))
	}
	if n := testutil.ToFloat64(m.execs.WithLabelValues("docker", "ok")); n != 2 {
		t.Errorf("ok execs = %v, want 2", n)
	}
	// Nothing reaches the process-wide registry.
	if n, _ := testutil.GatherAndCount(prometheus.DefaultGatherer, "agentbox_execs_total"); n != 0 {
		t.Errorf("default registry has %d agentbox_execs_total series", n)
	}
	// The registry is consistent (no duplicate or malformed metrics).
	if _, err := m.Registry().Gather(); err != nil {
		t.Errorf("gather: %v", err)
	}
}

func TestSandboxesScrapeError(t *testing.T) {
	m := New(Options{Sandboxes: func(context.Context) (map[SandboxKey]int, error) {
		return nil, errors.New("database is locked")
	}})
	if _, err := m.Registry().Gather(); err == nil || !strings.Contains(err.Error(), "database is locked") {
		t.Errorf("gather = %v, want the store's error", err)
	}
	// The handler still serves what it can.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body := rec.Body.String(); rec.Code != 200 || !strings.Contains(body, "go_goroutines") || strings.Contains(body, "agentbox_sandboxes{") {
		t.Errorf("status %d, body %q", rec.Code, body)
	}
	// The failure itself is counted, as the next scrape shows.
	rec = httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `promhttp_metric_handler_errors_total{cause="gathering"} 1`) {
		t.Errorf("handler errors not counted")
	}
}

func TestTwoMetricsDoNotCollide(t *testing.T) {
	a, b := New(Options{}), New(Options{})
	a.ObserveEgress(true)
	if n := testutil.ToFloat64(b.egressDecision.WithLabelValues("true")); n != 0 {
		t.Errorf("second Metrics sees %v decisions", n)
	}
}

func TestReconcilerRepairs(t *testing.T) {
	m := New(Options{RepairKinds: []string{"sandbox_lost", "dir_removed"}})
	m.ObserveRepair("sandbox_lost")
	m.ObserveRepair("sandbox_lost")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`agentbox_reconciler_repairs_total{kind="sandbox_lost"} 2`,
		// Declared kinds exist at zero from the start.
		`agentbox_reconciler_repairs_total{kind="dir_removed"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}
