//go:build linux

package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

var allNames = []string{
	"overlayfs", "user-namespaces", "cgroups", "landlock", "seccomp",
	"git", "bubblewrap", "runsc",
	"docker", "docker-runtime-runc", "docker-runtime-runsc",
	"probe-docker", "probe-gvisor", "probe-local",
}

func byName(t *testing.T, r Report) map[string]Check {
	t.Helper()
	m := make(map[string]Check, len(r.Checks))
	for _, c := range r.Checks {
		if _, dup := m[c.Name]; dup {
			t.Errorf("check %q reported twice", c.Name)
		}
		m[c.Name] = c
	}
	return m
}

func names(r Report) []string {
	var out []string
	for _, c := range r.Checks {
		out = append(out, c.Name)
	}
	return out
}

// TestRunOnThisMachine runs every check for real.
func TestRunOnThisMachine(t *testing.T) {
	dataDir := t.TempDir()
	// The local probe's root file system: busybox unpacked from the engine into a cache
	// of the test's own, as the local backend does on first use.
	cache := t.TempDir()
	if skip.Required() {
		if _, err := image.Unpack(t.Context(), "agentbox/busybox:latest", cache); err != nil {
			t.Fatalf("unpacking busybox for the local probe: %v", err)
		}
	}
	start := time.Now()
	r := Run(t.Context(), Options{DataDir: dataDir, ImageCache: cache})
	took := time.Since(start)
	for _, c := range r.Checks {
		t.Logf("%-22s %-7s %s  fix=%q", c.Name, c.Status, c.Detail, c.Fix)
	}
	t.Logf("ok=%v in %s", r.OK, took)

	if diff := cmp.Diff(allNames, names(r)); diff != "" {
		t.Fatalf("check names (-want +got):\n%s", diff)
	}
	if took > probeTimeout+2*time.Second {
		t.Errorf("Run took %s, want under %s", took, probeTimeout+2*time.Second)
	}
	for _, c := range r.Checks {
		switch c.Status {
		case StatusOK:
			if c.Fix != "" {
				t.Errorf("%s: ok but has fix %q", c.Name, c.Fix)
			}
		case StatusWarn, StatusMissing:
			if c.Fix == "" && !strings.HasPrefix(c.Detail, "check ") {
				t.Errorf("%s: %s without a fix: %s", c.Name, c.Status, c.Detail)
			}
		default:
			t.Errorf("%s: status %q is not ok, warn or missing", c.Name, c.Status)
		}
		if c.Detail == "" {
			t.Errorf("%s: empty detail", c.Name)
		}
	}

	got := byName(t, r)
	if g := got["git"]; g.Status != StatusOK || !strings.HasPrefix(g.Detail, "git version ") {
		t.Errorf("git = %+v, want ok with \"git version ...\"", g)
	}
	if !r.OK {
		t.Errorf("Report.OK = false with git ok")
	}
	if os.Geteuid() == 0 {
		if o := got["overlayfs"]; o.Status != StatusOK || !strings.Contains(o.Detail, "mounted") {
			t.Errorf("overlayfs as root = %+v, want ok after a real mount", o)
		}
	} else if o := got["overlayfs"]; o.Status != StatusWarn {
		t.Errorf("overlayfs as uid %d = %+v, want warn", os.Geteuid(), o)
	}
	// The overlay probe cleans up after itself and leaves no mount behind.
	if left, err := os.ReadDir(dataDir); err != nil || len(left) != 0 {
		t.Errorf("data dir after Run: %v entries, err %v; want empty", len(left), err)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), dataDir) {
		t.Errorf("a mount under %s is still in /proc/self/mountinfo", dataDir)
	}

	// AGENTBOX_REQUIRE_SETUP=1 says scripts/setup.sh has run on this machine, so every
	// check must be ok: CI sets it. Without it, only what holds on any Linux box is asserted.
	if !skip.Required() {
		t.Logf("%s is not 1: not requiring every check to be ok", skip.RequireSetupEnv)
		return
	}
	for _, c := range r.Checks {
		if c.Status != StatusOK {
			t.Errorf("%s=1 but %s is %s: %s (fix: %s)", skip.RequireSetupEnv, c.Name, c.Status, c.Detail, c.Fix)
		}
	}
	if len(r.Probes) != 3 {
		t.Errorf("probes %+v, want one per backend", r.Probes)
	}
	for _, p := range r.Probes {
		if !p.OK || p.Image == "" || p.Runtime == "" || len(p.Commands) == 0 {
			t.Errorf("probe %+v, want ok with its image, runtime and commands", p)
		}
	}
	if g := got["probe-gvisor"]; !strings.Contains(g.Detail, "runsc") {
		t.Errorf("probe-gvisor detail %q names no runsc", g.Detail)
	}
	if d := got["docker"]; !strings.Contains(d.Detail, "API 1.") {
		t.Errorf("docker detail %q names no API version", d.Detail)
	}
	if l := got["landlock"]; !strings.HasPrefix(l.Detail, "landlock ABI ") {
		t.Errorf("landlock detail %q names no ABI", l.Detail)
	}
}

func TestRunBogusDockerHost(t *testing.T) {
	start := time.Now()
	r := Run(t.Context(), Options{DataDir: t.TempDir(), DockerHost: "unix:///nonexistent.sock"})
	took := time.Since(start)
	got := byName(t, r)
	for _, n := range []string{"docker", "docker-runtime-runc", "docker-runtime-runsc"} {
		c := got[n]
		if c.Status != StatusMissing || c.Fix != dockerFix {
			t.Errorf("%s = %+v, want missing with fix %q", n, c, dockerFix)
		}
	}
	if d := got["docker"].Detail; !strings.Contains(d, "/nonexistent.sock") {
		t.Errorf("docker detail %q does not name the socket", d)
	}
	if !r.OK {
		t.Errorf("Report.OK = false: a missing engine must not fail the report (docker is optional)")
	}
	if took > toolTimeout {
		t.Errorf("Run with a bogus docker host took %s", took)
	}

	// The docker check alone answers at once: nothing listens, nothing to wait for.
	start = time.Now()
	checkDocker(t.Context(), Options{DockerHost: "unix:///nonexistent.sock"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("checkDocker on a missing socket took %s", took)
	}
}

// serveEngine serves handler on a unix socket in a temp dir and returns its DockerHost.
func serveEngine(t *testing.T, handler http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

// engine answers like Docker's API with the given runtimes.
func engine(runtimes string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("OK")) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"Version":"99.0.0","ApiVersion":"1.99","MinAPIVersion":"1.24"}`))
	})
	mux.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"Driver":"overlay2","CgroupVersion":"2","CgroupDriver":"systemd","DefaultRuntime":"runc","Runtimes":` + runtimes + `}`))
	})
	return mux
}

// TestDockerEngineReplies covers engine configurations this machine does not have, with
// an engine stand-in speaking the same HTTP over a unix socket.
func TestDockerEngineReplies(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	tests := []struct {
		name    string
		handler http.Handler
		want    map[string]Status
		detail  string // in the docker check's detail
	}{
		{
			name:    "runsc registered as the gvisor backend needs",
			handler: engine(`{"runc":{"path":"runc"},"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none","--host-uds=open"]}}`),
			want:    map[string]Status{"docker": StatusOK, "docker-runtime-runc": StatusOK, "docker-runtime-runsc": StatusOK},
			detail:  "API 1.99",
		},
		{
			name:    "runsc without --host-uds=open",
			handler: engine(`{"runc":{"path":"runc"},"runsc":{"path":"/usr/bin/runsc"}}`),
			want:    map[string]Status{"docker": StatusOK, "docker-runtime-runc": StatusOK, "docker-runtime-runsc": StatusWarn},
			detail:  "engine 99.0.0",
		},
		{
			name:    "runsc not registered",
			handler: engine(`{"runc":{"path":"runc"}}`),
			want:    map[string]Status{"docker": StatusOK, "docker-runtime-runc": StatusOK, "docker-runtime-runsc": StatusMissing},
			detail:  "storage overlay2",
		},
		{
			name: "not an engine",
			handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "page not found", http.StatusNotFound)
			}),
			want:   map[string]Status{"docker": StatusMissing, "docker-runtime-runc": StatusMissing, "docker-runtime-runsc": StatusMissing},
			detail: "404",
		},
		{
			name: "engine that never answers",
			handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				<-hang
			}),
			want:   map[string]Status{"docker": StatusMissing, "docker-runtime-runc": StatusMissing, "docker-runtime-runsc": StatusMissing},
			detail: "deadline exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := serveEngine(t, tt.handler)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			checks := checkDocker(ctx, Options{DockerHost: host})
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("checkDocker took %s with a 1s deadline", took)
			}
			got := map[string]Status{}
			for _, c := range checks {
				got[c.Name] = c.Status
				if c.Status != StatusOK && c.Fix == "" {
					t.Errorf("%s: %s without a fix", c.Name, c.Status)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
			if !strings.Contains(checks[0].Detail, tt.detail) {
				t.Errorf("docker detail %q does not contain %q", checks[0].Detail, tt.detail)
			}
		})
	}
}

func TestDockerHostForms(t *testing.T) {
	tests := []struct {
		host    string
		wantErr string
	}{
		{host: "unix:///var/run/docker.sock"},
		{host: "tcp://127.0.0.1:2375"},
		{host: "ssh://user@host", wantErr: "unsupported scheme"},
		{host: "unix://", wantErr: "no socket path"},
		{host: "tcp://", wantErr: "no address"},
	}
	for _, tt := range tests {
		_, _, err := dockerClient(tt.host)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("dockerClient(%q): %v", tt.host, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("dockerClient(%q) = %v, want error containing %q", tt.host, err, tt.wantErr)
		}
	}
}

func TestDockerHostFromEnvironment(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent-from-env.sock")
	r := Run(t.Context(), Options{DataDir: t.TempDir()})
	if d := byName(t, r)["docker"]; !strings.Contains(d.Detail, "nonexistent-from-env.sock") {
		t.Errorf("docker detail %q: $DOCKER_HOST not used", d.Detail)
	}
}

func TestOverlayDataDirMissing(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the overlay test mount runs only as root")
	}
	dir := filepath.Join(t.TempDir(), "does", "not", "exist")
	c := checkOverlay(t.Context(), Options{DataDir: dir})
	if c.Status != StatusWarn || !strings.Contains(c.Fix, dir) {
		t.Errorf("checkOverlay with a missing data dir = %+v, want warn with a fix naming it", c)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("checkOverlay created %s", dir)
	}
}

func TestRunAllStuckChecker(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	checkers := []checker{
		{names: []string{"quick"}, timeout: time.Second, run: func(context.Context, Options) []Check {
			return []Check{{Name: "quick", Status: StatusOK, Detail: "fine"}}
		}},
		// Ignores its context, as a syscall stuck in the kernel would.
		{names: []string{"stuck-a", "stuck-b"}, timeout: 100 * time.Millisecond, run: func(context.Context, Options) []Check {
			<-release
			return nil
		}},
	}
	start := time.Now()
	got := runAll(t.Context(), Options{}, checkers)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("runAll waited %s for a stuck checker", took)
	}
	want := []Check{
		{Name: "quick", Status: StatusOK, Detail: "fine"},
		{Name: "stuck-a", Status: StatusWarn, Detail: "check did not finish within 100ms"},
		{Name: "stuck-b", Status: StatusWarn, Detail: "check did not finish within 100ms"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("runAll (-want +got):\n%s", diff)
	}
}

func TestReportOK(t *testing.T) {
	tests := []struct {
		name   string
		checks []Check
		want   bool
	}{
		{"all ok", []Check{{Name: "git", Status: StatusOK}, {Name: "docker", Status: StatusOK}}, true},
		{"git missing", []Check{{Name: "git", Status: StatusMissing}, {Name: "docker", Status: StatusOK}}, false},
		{"git warn", []Check{{Name: "git", Status: StatusWarn}}, true},
		{"optional missing", []Check{{Name: "git", Status: StatusOK}, {Name: "docker", Status: StatusMissing}, {Name: "overlayfs", Status: StatusMissing}}, true},
		{"platform unsupported", []Check{{Name: "platform", Status: StatusMissing}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reportOK(tt.checks); got != tt.want {
				t.Errorf("reportOK = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReportJSON pins the JSON shape that `agentbox doctor --json` prints.
func TestReportJSON(t *testing.T) {
	r := Report{OK: true, Checks: []Check{
		{Name: "git", Status: StatusOK, Detail: "git version 2.39.5"},
		{Name: "docker", Status: StatusMissing, Detail: "not answering", Fix: "scripts/setup.sh"},
	}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"checks":[{"name":"git","status":"ok","detail":"git version 2.39.5"},` +
		`{"name":"docker","status":"missing","detail":"not answering","fix":"scripts/setup.sh"}],"ok":true,"probes":null}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
}

// TestProbeFlagsBrokenRunsc runs the probe's script under Debian's runsc 2022 (when it is
// installed: setup.sh keeps it as the fallback), whose statx fails, and checks that the
// probe's judgement names the failing tool and the reason, and marks the backend broken.
func TestProbeFlagsBrokenRunsc(t *testing.T) {
	const debianRunsc = "/usr/bin/runsc"
	out, err := exec.Command(debianRunsc, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0.0~2022") || os.Geteuid() != 0 {
		backendtest.SkipOrFail(t, fmt.Sprintf("no Debian runsc 2022 to run as root here (setup.sh keeps it as the fallback) (%v: %s)", err, firstLine(string(out))))
	}
	p := Probe{Backend: "gvisor", Image: "the host's root", Runtime: runtimeVersion(t.Context(), debianRunsc), Commands: probeCommands}
	args := []string{"--network=none", "--ignore-cgroups", "do", "/bin/sh", "-c", probeScript}
	got, c := finishProbe(t.Context(), p, debianRunsc, args, dockerFix)
	t.Logf("%+v", got)
	if got.OK || c.Status != StatusMissing || !strings.Contains(c.Detail, "Invalid argument") || !strings.Contains(c.Fix, "statx") {
		t.Errorf("probe under Debian's runsc: %+v %+v, want missing with the statx failure and a fix", got, c)
	}
}
