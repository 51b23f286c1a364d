package envdfs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// TestSDKFiles runs ../testdata/files.mjs, through the official E2B JS SDK
// (npm e2b 2.51.0), against this package's service. The control API is a
// stand-in that hands out one sandbox (package e2b serves the real one);
// the checks that need commands are left to e2b's acceptance test.
func TestSDKFiles(t *testing.T) {
	tools, err := testutil.NPMTools(t.Context(), filepath.Join("testdata", "e2bsdk"))
	if errors.Is(err, testutil.ErrNoNode) {
		backendtest.SkipOrFail(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	// 0.5.7 is what package e2b announces; 0.6.4 unlocks the SDK's
	// includeEntry.
	for _, envdVersion := range []string{"0.5.7", "0.6.4"} {
		t.Run(envdVersion, func(t *testing.T) {
			const limit = 1 << 20
			f := newFixture(t, fixtureOpts{opts: Options{MaxUpload: limit}})
			var killed atomic.Bool
			control := http.NewServeMux()
			control.HandleFunc("POST /v2/sandboxes", func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-API-Key") != "e2b_test" {
					http.Error(w, `{"code":401,"message":"bad key"}`, 401)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{
					"sandboxID": f.e2bID, "templateID": "base", "clientID": "agentbox",
					"envdVersion": envdVersion, "envdAccessToken": testToken,
				})
			})
			control.HandleFunc("DELETE /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
				killed.Store(r.PathValue("id") == f.e2bID)
				w.WriteHeader(http.StatusNoContent)
			})
			api := httptest.NewServer(control)
			t.Cleanup(api.Close)

			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", filepath.Join("..", "testdata", "files.mjs"))
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"),
				"HOME=" + t.TempDir(),
				"E2B_API_URL=" + api.URL,
				"E2B_SANDBOX_URL=" + f.srv.URL,
				"E2B_API_KEY=e2b_test",
				"E2B_SDK_MODULE=" + filepath.Join(tools, "node_modules", "e2b", "dist", "index.mjs"),
				"E2B_FILES_COMMANDS=0",
				"E2B_FILES_HUGE=2097152",
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("files.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			var res struct {
				OK     bool `json:"ok"`
				Checks int  `json:"checks"`
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || !res.OK || res.Checks < 30 {
				t.Errorf("files.mjs printed %q (%v)", stdout.String(), err)
			}
			t.Logf("files.mjs: %d checks", res.Checks)
			if !killed.Load() {
				t.Error("the script did not kill its sandbox")
			}
			if _, err := os.Lstat("/etc/agentbox-e2b-canary"); err == nil {
				t.Error("/etc/agentbox-e2b-canary exists")
			}
		})
	}
}
