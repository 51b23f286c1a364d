package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// dockerCheckNames are the checks checkDocker reports, in order.
var dockerCheckNames = []string{"docker", "docker-runtime-runc", "docker-runtime-runsc"}

// dockerFix is the repo's setup script, which installs, configures and starts the engine.
const dockerFix = "scripts/setup.sh"

// runscWantArgs are the runtime arguments the gvisor backend relies on: no network stack
// inside the sandbox, and connect(2) to a host unix socket allowed so that the guest can
// reach the daemon through a bind-mounted socket.
var runscWantArgs = []string{"--network=none", "--host-uds=open"}

// dockerVersion is the part of GET /version that the check reports.
type dockerVersion struct {
	Version       string `json:"Version"`
	APIVersion    string `json:"ApiVersion"`
	MinAPIVersion string `json:"MinAPIVersion"`
}

// dockerInfo is the part of GET /info that the check reports.
type dockerInfo struct {
	ServerVersion  string `json:"ServerVersion"`
	Driver         string `json:"Driver"`
	CgroupVersion  string `json:"CgroupVersion"`
	CgroupDriver   string `json:"CgroupDriver"`
	DefaultRuntime string `json:"DefaultRuntime"`
	Runtimes       map[string]struct {
		Path        string   `json:"path"`
		RuntimeArgs []string `json:"runtimeArgs"`
	} `json:"Runtimes"`
}

// checkDocker talks plain HTTP to the engine (GET /_ping, /version, /info), which keeps
// the doctor free of the Docker SDK and shows exactly what the engine says.
func checkDocker(ctx context.Context, opts Options) []Check {
	engine := Check{Name: "docker"}
	runc := Check{Name: "docker-runtime-runc"}
	runsc := Check{Name: "docker-runtime-runsc"}
	fix := dockerFix
	fail := func(detail string) []Check {
		engine.Status, engine.Detail, engine.Fix = StatusMissing, detail, fix
		for _, c := range []*Check{&runc, &runsc} {
			c.Status, c.Detail, c.Fix = StatusMissing, "cannot ask: no docker engine reachable (see the docker check)", fix
		}
		return []Check{engine, runc, runsc}
	}

	client, base, err := dockerClient(opts.DockerHost)
	if err != nil {
		return fail(err.Error())
	}
	defer client.CloseIdleConnections()

	start := time.Now()
	ping, err := dockerGet(ctx, client, base, "/_ping")
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			// The engine may well be up; this user may not talk to it.
			fix = "run as root, or add the user to the docker group (usermod -aG docker USER)"
		}
		return fail(fmt.Sprintf("engine at %s not answering: %v", opts.DockerHost, err))
	}
	took := time.Since(start)
	if strings.TrimSpace(string(ping)) != "OK" {
		return fail(fmt.Sprintf("engine at %s: unexpected /_ping reply %q", opts.DockerHost, truncate(string(ping), 80)))
	}
	var ver dockerVersion
	if err := dockerGetJSON(ctx, client, base, "/version", &ver); err != nil {
		return fail(fmt.Sprintf("engine at %s: %v", opts.DockerHost, err))
	}
	var info dockerInfo
	if err := dockerGetJSON(ctx, client, base, "/info", &info); err != nil {
		return fail(fmt.Sprintf("engine at %s: %v", opts.DockerHost, err))
	}

	engine.Status = StatusOK
	engine.Detail = fmt.Sprintf("engine %s at %s, API %s (min %s), storage %s, cgroup v%s (%s), default runtime %s, ping %s",
		ver.Version, opts.DockerHost, ver.APIVersion, ver.MinAPIVersion, info.Driver,
		info.CgroupVersion, info.CgroupDriver, info.DefaultRuntime, ms(took))

	names := make([]string, 0, len(info.Runtimes))
	for n := range info.Runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	listed := "engine lists runtimes [" + strings.Join(names, " ") + "]"

	if rt, ok := info.Runtimes["runc"]; ok {
		runc.Status, runc.Detail = StatusOK, "runc registered, path "+rt.Path
	} else {
		runc.Status, runc.Detail, runc.Fix = StatusMissing, "runc not registered; "+listed, "apt-get install -y runc, then restart dockerd"
	}

	rt, ok := info.Runtimes["runsc"]
	switch {
	case !ok:
		runsc.Status, runsc.Detail, runsc.Fix = StatusMissing, "runsc not registered; "+listed, dockerFix
	case !containsAll(rt.RuntimeArgs, runscWantArgs):
		runsc.Status = StatusWarn
		runsc.Detail = fmt.Sprintf("runsc registered, path %s, args %v; the gvisor backend needs %v", rt.Path, rt.RuntimeArgs, runscWantArgs)
		runsc.Fix = dockerFix
	default:
		runsc.Status, runsc.Detail = StatusOK, fmt.Sprintf("runsc registered, path %s, args %v", rt.Path, rt.RuntimeArgs)
	}
	return []Check{engine, runc, runsc}
}

// dockerClient returns an HTTP client that reaches host, and the base URL to use with it.
// Only unix:// and plain tcp:// are understood: the doctor does not speak TLS to an engine.
func dockerClient(host string) (*http.Client, string, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, "", fmt.Errorf("docker host %q: %w", host, err)
	}
	var dial func(ctx context.Context) (net.Conn, error)
	base := "http://docker"
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		if path == "" {
			return nil, "", fmt.Errorf("docker host %q: no socket path", host)
		}
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	case "tcp", "http":
		if u.Host == "" {
			return nil, "", fmt.Errorf("docker host %q: no address", host)
		}
		addr := u.Host
		base = "http://" + addr
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	default:
		return nil, "", fmt.Errorf("docker host %q: unsupported scheme %q (want unix:// or tcp://)", host, u.Scheme)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		// One engine, a few sequential requests: keep the connection, but not forever.
		MaxIdleConns:          1,
		IdleConnTimeout:       dockerTimeout,
		ResponseHeaderTimeout: dockerTimeout,
		DisableCompression:    true,
	}
	return &http.Client{Transport: tr, Timeout: dockerTimeout}, base, nil
}

// dockerGet fetches base+path and returns at most 4 MiB of its body, failing on a
// non-200 reply.
func dockerGet(ctx context.Context, client *http.Client, base, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		// A *url.Error repeats the made-up URL; the dial or timeout error is the news.
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, truncate(strings.TrimSpace(string(body)), 200))
	}
	return body, nil
}

func dockerGetJSON(ctx context.Context, client *http.Client, base, path string, v any) error {
	body, err := dockerGet(ctx, client, base, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
