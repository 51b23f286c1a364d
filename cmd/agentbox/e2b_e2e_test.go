package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// e2bImage is the image the E2B tests' base template runs: the Debian
// image with E2B's user and home (examples/e2b/Dockerfile).
const e2bImage = "agentbox/e2b:test"

var buildE2BImage = sync.OnceValue(func() error {
	out, err := exec.Command(binary, "image", "build", "--dockerfile", filepath.Join("..", "..", "examples", "e2b", "Dockerfile"), "--tag", e2bImage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("agentbox image build %s: %v\n%s", e2bImage, err, out)
	}
	return nil
})

// e2bSDK installs the pinned E2B JS SDK (testdata/e2b's package and lock
// files) into the npm cache outside the clone and returns a directory
// holding the acceptance script next to its node_modules.
func e2bSDK(t *testing.T) string {
	t.Helper()
	dir, err := testutil.NPMTools(t.Context(), filepath.Join("testdata", "e2b"))
	if err != nil {
		backendtest.SkipOrFail(t, "installing the pinned e2b SDK: "+err.Error())
	}
	work := t.TempDir()
	script, err := os.ReadFile(filepath.Join("testdata", "e2b", "acceptance.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "acceptance.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return work
}

// e2bDaemon is a daemon serving its API and the E2B endpoint on loopback.
type e2bDaemon struct {
	api, e2b string // tcp://HOST:PORT, http://HOST:PORT
	token    string
}

// startE2BDaemon runs `agentbox serve --e2b-listen` with backend as the
// default and the E2B base template on e2bImage.
func startE2BDaemon(t *testing.T, data, backend string) e2bDaemon {
	t.Helper()
	d := e2bDaemon{token: "e2b-test-token-0123456789abcdef"}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	doc := fmt.Sprintf("data_dir: %s\nlisten: tcp://127.0.0.1:0\ndefault_backend: %s\ne2b_templates:\n  base: {image: %q, home: /home/user}\n", data, backend, e2bImage)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "serve", "--config", cfg, "--e2b-listen", "tcp://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGENTBOX_TOKEN="+d.token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	dec := json.NewDecoder(stderr)
	for d.api == "" || d.e2b == "" {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("daemon log ended before it served: %v", err)
		}
		a, _ := line["addr"].(string)
		switch line["msg"] {
		case "agentbox serving":
			d.api = a
		case "agentbox serving the E2B endpoint":
			d.e2b = strings.Replace(a, "tcp://", "http://", 1)
		}
	}
	go io.Copy(io.Discard, io.MultiReader(dec.Buffered(), stderr))
	return d
}

// TestE2BSDK runs the official E2B JS SDK (testdata/e2b/acceptance.mjs)
// against a real daemon on every backend, with only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY set: sandboxes, commands, background
// commands, terminals, pause and resume, errors on bad input; then the
// change its repo sandbox made shows in `agentbox ws diff`.
func TestE2BSDK(t *testing.T) {
	requireDebianEngine(t)
	work := e2bSDK(t)
	if err := buildE2BImage(); err != nil {
		t.Fatal(err)
	}
	src := testutil.NewRepo(t, calcRepo)
	everyBackend(t, func(t *testing.T, backend string) {
		data := t.TempDir()
		cleanupAll(t, data)
		d := startE2BDaemon(t, data, backend)
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Join(work, "acceptance.mjs"), src.Dir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "E2B_API_URL=" + d.e2b, "E2B_SANDBOX_URL=" + d.e2b, "E2B_API_KEY=" + d.token}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node acceptance.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		var sum struct {
			Checks      int
			RepoSandbox string
			Files       bool
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Checks < 82 || sum.RepoSandbox == "" {
			t.Fatalf("node acceptance.mjs: summary %+v (%v)\n%s", sum, err, stdout.String())
		}
		// The file half of envd (package envdfs) is written apart; once it
		// is in the tree, the script must have exercised it.
		if _, err := os.Stat(filepath.Join("..", "..", "internal", "e2b", "envdfs")); err == nil && !sum.Files {
			t.Errorf("internal/e2b/envdfs is in the tree but the endpoint serves no files")
		}
		t.Logf("%s: %d checks passed (files: %v)", backend, sum.Checks, sum.Files)

		// The killed repo sandbox's workspace stays, with its change.
		diff := exec.Command(binary, "--host", d.api, "ws", "diff", sum.RepoSandbox)
		diff.Env = append(os.Environ(), "AGENTBOX_TOKEN="+d.token)
		out, err := diff.CombinedOutput()
		if err != nil {
			t.Fatalf("agentbox ws diff %s: %v\n%s", sum.RepoSandbox, err, out)
		}
		if !strings.Contains(string(out), "+def sub(a, b):\n+    return a - b\n") {
			t.Errorf("agentbox ws diff %s does not show the sandbox's change:\n%s", sum.RepoSandbox, out)
		}
	})
}
