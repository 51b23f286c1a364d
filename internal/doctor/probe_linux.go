package doctor

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// probeTimeout bounds each backend's functional probe: a container start under runsc
// takes about half a second here, a loaded machine several.
const probeTimeout = 30 * time.Second

// probeCheckNames are the checks checkProbes reports, in order: one per backend.
var probeCheckNames = []string{"probe-docker", "probe-gvisor", "probe-local"}

// probeImages are the images a probe runs in, best first: the Debian image has GNU
// coreutils, whose ls and stat use statx (what Debian's 2022 runsc breaks); busybox's
// use stat and lstat, so a probe in it cannot catch that.
var probeImages = []string{"agentbox/debian:bookworm", "agentbox/busybox:latest"}

// probeKinds are the unpacked root file systems of the local backend, best first, as
// DATA/images/KIND/rootfs.
var probeKinds = []string{"debian", "busybox"}

// probeUID is the sandbox user the probes run as (the daemon's default).
const probeUID = "1000"

// probeScript runs ordinary tools the way a command in a sandbox would, and names the
// first one that fails with the first line it printed.
const probeScript = `run() {
	out=$("$@" 2>&1 >/dev/null) || { printf 'FAILED %s: %s\n' "$*" "$(printf '%s\n' "$out" | head -n 1)"; exit 1; }
}
run ls -la /
run stat /
run find /etc -maxdepth 1 -name passwd
run du -s /bin/
run ps
run cat /proc/self/status
cd /tmp && echo probe > f && run tar -cf f.tar f && run tar -tf f.tar
echo PROBE-OK`

// probeCommands is what probeScript runs, for the report.
var probeCommands = []string{"ls -la /", "stat /", "find", "du", "ps", "cat /proc/self/status", "tar"}

// checkProbes runs each backend's probe concurrently.
func checkProbes(ctx context.Context, opts Options) []Check {
	probes := []func(context.Context, Options) (Probe, Check){probeDocker("docker", "runc"), probeDocker("gvisor", "runsc"), probeLocal}
	out := make([]Check, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			pr, c := p(ctx, opts)
			c.Name = probeCheckNames[i]
			c.Probe = &pr
			out[i] = c
		})
	}
	wg.Wait()
	return out
}

// probeDocker probes a docker backend: the same container settings as a sandbox's, run
// through the docker CLI against the engine.
func probeDocker(backend, runtime string) func(context.Context, Options) (Probe, Check) {
	return func(ctx context.Context, opts Options) (Probe, Check) {
		p := Probe{Backend: backend, Commands: probeCommands}
		fail := func(status Status, detail, fix string) (Probe, Check) {
			p.Detail = detail
			return p, Check{Status: status, Detail: backend + ": " + detail, Fix: fix}
		}
		dockerCLI, err := exec.LookPath("docker")
		if err != nil {
			return fail(StatusMissing, "the docker command is not installed", "apt-get install -y docker.io (or scripts/setup.sh)")
		}
		client, base, err := dockerClient(opts.DockerHost)
		if err != nil {
			return fail(StatusMissing, err.Error(), dockerFix)
		}
		defer client.CloseIdleConnections()
		var info dockerInfo
		if err := dockerGetJSON(ctx, client, base, "/info", &info); err != nil {
			return fail(StatusMissing, "no engine: "+err.Error(), dockerFix)
		}
		rt, ok := info.Runtimes[runtime]
		if !ok {
			return fail(StatusMissing, "the engine has no "+runtime+" runtime", dockerFix)
		}
		p.Runtime = runtime
		if rt.Path != "" {
			p.Runtime = runtimeVersion(ctx, rt.Path)
		}
		for _, img := range probeImages {
			if _, err := dockerGet(ctx, client, base, "/images/"+url.PathEscape(img)+"/json"); err == nil {
				p.Image = img
				break
			}
		}
		if p.Image == "" {
			return fail(StatusWarn, fmt.Sprintf("no image to probe with (%s)", strings.Join(probeImages, ", ")), "agentbox image build --kind debian")
		}
		args := []string{"--host", opts.DockerHost, "run", "--rm", "--runtime", runtime, "--network", "none",
			"--user", probeUID + ":" + probeUID, "--read-only", "--tmpfs", "/tmp:exec,mode=1777",
			"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--entrypoint", "/bin/sh", p.Image, "-c", probeScript}
		return finishProbe(ctx, p, dockerCLI, args, dockerFix)
	}
}

// probeLocal probes the local backend: a bubblewrap jail over an unpacked root file
// system, as the backend starts one.
func probeLocal(ctx context.Context, opts Options) (Probe, Check) {
	p := Probe{Backend: "local", Commands: probeCommands}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		p.Detail = "bwrap is not installed"
		return p, Check{Status: StatusMissing, Detail: "local: " + p.Detail, Fix: "apt-get install -y bubblewrap"}
	}
	p.Runtime = runtimeVersion(ctx, bwrap)
	// The local backend's cache of unpacked images, by engine image id; then the root
	// file systems `image build --no-engine` leaves in the data dir.
	var dirs []string
	if client, base, err := dockerClient(opts.DockerHost); err == nil {
		for _, img := range probeImages {
			var in struct {
				ID string `json:"Id"`
			}
			if dockerGetJSON(ctx, client, base, "/images/"+url.PathEscape(img)+"/json", &in) == nil && in.ID != "" {
				dirs = append(dirs, filepath.Join(opts.ImageCache, strings.TrimPrefix(in.ID, "sha256:"), "rootfs"))
			}
		}
		client.CloseIdleConnections()
	}
	for _, k := range probeKinds {
		dirs = append(dirs, filepath.Join(opts.DataDir, "images", k, "rootfs"))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "bin", "sh")); err == nil {
			p.Image = dir
			break
		}
	}
	if p.Image == "" {
		p.Detail = fmt.Sprintf("no unpacked root file system in %s nor under %s", opts.ImageCache, filepath.Join(opts.DataDir, "images"))
		return p, Check{Status: StatusWarn, Detail: "local: " + p.Detail, Fix: "agentbox image build --kind debian"}
	}
	args := []string{"--ro-bind", p.Image, "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--unshare-all", "--die-with-parent", "--new-session", "--uid", probeUID, "--gid", probeUID, "--chdir", "/",
		"/bin/sh", "-c", probeScript}
	return finishProbe(ctx, p, bwrap, args, "scripts/setup.sh")
}

// finishProbe runs the probe's command and judges it.
func finishProbe(ctx context.Context, p Probe, name string, args []string, fix string) (Probe, Check) {
	start := time.Now()
	out, err := command(ctx, name, args...)
	p.DurationMS = time.Since(start).Milliseconds()
	where := fmt.Sprintf("in %s under %s", p.Image, p.Runtime)
	switch {
	case err == nil && strings.HasSuffix(out, "PROBE-OK"):
		p.OK = true
		p.Detail = fmt.Sprintf("%s ran %s in %s", strings.Join(p.Commands, ", "), where, ms(time.Since(start)))
		return p, Check{Status: StatusOK, Detail: p.Backend + ": " + p.Detail}
	case strings.Contains(out, "FAILED "):
		_, failed, _ := strings.Cut(out, "FAILED ")
		p.Detail = fmt.Sprintf("%s %s", firstLine(failed), where)
	default:
		p.Detail = fmt.Sprintf("the probe did not run %s: %s", where, commandError(err, out))
	}
	if p.Backend == "gvisor" && strings.Contains(p.Runtime, "0.0~2022") {
		fix = "Debian's runsc 2022 breaks statx (ls -l, stat): run scripts/setup.sh, which builds and registers a current one"
	}
	return p, Check{Status: StatusMissing, Detail: p.Backend + ": " + p.Detail, Fix: fix}
}

// runtimeVersion is "PATH (first line of PATH --version)".
func runtimeVersion(ctx context.Context, path string) string {
	out, err := command(ctx, path, "--version")
	if err != nil || firstLine(out) == "" {
		return path
	}
	return path + " (" + firstLine(out) + ")"
}
