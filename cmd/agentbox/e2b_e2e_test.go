package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/e2b/processpb"
	"github.com/agentbox/agentbox/internal/e2b/processpb/processpbconnect"
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
	// stop ends the daemon (SIGTERM) and waits for it.
	stop func()
}

// startE2BDaemon runs `agentbox serve --e2b-listen` with backend as the
// default and the E2B base template on e2bImage.
func startE2BDaemon(t *testing.T, data, backend string) *e2bDaemon {
	t.Helper()
	d := &e2bDaemon{token: "e2b-test-token-0123456789abcdef"}
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
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	t.Cleanup(d.stop)
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

// e2bCall makes a control API call and decodes its JSON reply.
func (d *e2bDaemon) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, d.e2b+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// run runs a shell command through envd's process service with the
// Connect JSON codec (as the SDK speaks it) and returns its stdout and
// exit code.
func (d *e2bDaemon) run(t *testing.T, id, token, sh string) (string, int32) {
	t.Helper()
	pc := processpbconnect.NewProcessClient(http.DefaultClient, d.e2b, connect.WithProtoJSON())
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", sh}}})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("X-Access-Token", token)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stream, err := pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil {
			return out.String(), end.GetExitCode()
		}
	}
	t.Fatalf("%s: the stream ended without an end event: %v", sh, stream.Err())
	return "", 0
}

// TestE2BRestart checks that the E2B sandboxes a daemon handed out
// outlive it: after a restart their records, metadata, tokens and files
// are there and commands run again, and one whose timeout ran out while
// the daemon was down is gone.
func TestE2BRestart(t *testing.T) {
	requireDebianEngine(t)
	if err := buildE2BImage(); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	cleanupAll(t, data)
	d := startE2BDaemon(t, data, "docker")
	type created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	var keep, short created
	if st := d.call(t, "POST", "/v2/sandboxes", `{"templateID": "base", "timeout": 600, "metadata": {"k": "v"}}`, &keep); st != 201 {
		t.Fatalf("create: %d", st)
	}
	if st := d.call(t, "POST", "/v2/sandboxes", `{"templateID": "base", "timeout": 600}`, &short); st != 201 {
		t.Fatalf("create: %d", st)
	}
	if out, code := d.run(t, keep.SandboxID, keep.EnvdAccessToken, "echo kept > f.txt; pwd"); code != 0 || out != "/home/user\n" {
		t.Fatalf("run: %q, exit %d", out, code)
	}
	if _, code := d.run(t, keep.SandboxID, keep.EnvdAccessToken, "exit 4"); code != 4 {
		t.Fatalf("exit 4: exit %d", code)
	}
	d.stop()
	// The short one's time runs out while the daemon is down.
	recFile := filepath.Join(data, "e2b", "sandboxes", short.SandboxID+".json")
	b, err := os.ReadFile(recFile)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["end_at"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	d = startE2BDaemon(t, data, "docker")
	var info struct {
		SandboxID string            `json:"sandboxID"`
		State     string            `json:"state"`
		Metadata  map[string]string `json:"metadata"`
	}
	if st := d.call(t, "GET", "/sandboxes/"+keep.SandboxID, "", &info); st != 200 || info.State != "running" || info.Metadata["k"] != "v" {
		t.Fatalf("getInfo after a restart: %d %+v", st, info)
	}
	if out, code := d.run(t, keep.SandboxID, keep.EnvdAccessToken, "cat f.txt"); code != 0 || out != "kept\n" {
		t.Fatalf("run after a restart: %q, exit %d", out, code)
	}
	deadline := time.Now().Add(30 * time.Second)
	for d.call(t, "GET", "/sandboxes/"+short.SandboxID, "", nil) != 404 {
		if time.Now().After(deadline) {
			t.Fatal("a sandbox whose timeout ran out while the daemon was down is still there")
		}
		time.Sleep(100 * time.Millisecond) // the expiry runs as the daemon starts; polled, bounded
	}
	// Killed: its scratch workspace went with it.
	ws := exec.Command(binary, "--host", d.api, "ws", "show", short.SandboxID)
	ws.Env = append(os.Environ(), "AGENTBOX_TOKEN="+d.token)
	if out, err := ws.CombinedOutput(); err == nil || !strings.Contains(string(out), "not found") {
		t.Errorf("ws show %s after its timeout: %v\n%s", short.SandboxID, err, out)
	}
	if st := d.call(t, "DELETE", "/sandboxes/"+keep.SandboxID, "", nil); st != 204 {
		t.Fatalf("kill: %d", st)
	}
}
