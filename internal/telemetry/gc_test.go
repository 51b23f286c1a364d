package telemetry

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGCRemovals(t *testing.T) {
	m := New(Options{})
	m.ObserveGCRemoval("pristine")
	m.ObserveGCRemoval("pristine")
	m.ObserveGCRemoval("repo")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`agentbox_gc_removals_total{kind="pristine"} 2`,
		`agentbox_gc_removals_total{kind="repo"} 1`,
		// Every kind exists from the start.
		`agentbox_gc_removals_total{kind="sandbox"} 0`,
		`agentbox_gc_removals_total{kind="workspace"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}
