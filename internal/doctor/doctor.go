// Package doctor checks whether this machine can run agentbox and its backends: kernel
// features (overlayfs, user namespaces, cgroups, Landlock, seccomp), host tools (git,
// bubblewrap, runsc) and the Docker engine with its runtimes. It is what `agentbox
// doctor` prints.
//
// Every check does the real thing where it can (a test overlay mount, a bubblewrap run,
// an HTTP round trip to the engine) rather than trusting a version string, and every
// check is bounded by a timeout, so Run always returns promptly.
package doctor

import (
	"context"
	"os"
)

// Status is the outcome of one check.
type Status string

// The statuses a check can have.
const (
	StatusOK      Status = "ok"      // present and working
	StatusWarn    Status = "warn"    // present but degraded, or could not be fully tested
	StatusMissing Status = "missing" // absent or not working
)

// Check is the result of one check.
type Check struct {
	// Name identifies the check, e.g. "overlayfs" or "docker-runtime-runsc".
	Name string `json:"name"`
	// Status is ok, warn or missing.
	Status Status `json:"status"`
	// Detail says what was found, e.g. "overlay mounted in 2ms" or "landlock ABI 7".
	Detail string `json:"detail"`
	// Fix is the command or step that fixes the problem; empty when Status is ok.
	Fix string `json:"fix,omitempty"`
	// Probe is the functional probe behind a probe-BACKEND check.
	Probe *Probe `json:"probe,omitempty"`
}

// Probe is the outcome of one backend's functional probe: ordinary developer tools run
// in an environment made the way that backend makes a sandbox's (same runtime, user,
// read-only root, no network).
type Probe struct {
	// Backend is "docker", "gvisor" or "local".
	Backend string `json:"backend"`
	// OK is true when every tool ran.
	OK bool `json:"ok"`
	// Image is the image (or unpacked root file system) the probe ran in.
	Image string `json:"image,omitempty"`
	// Runtime is what ran it: the OCI runtime's path and version, or bubblewrap's.
	Runtime string `json:"runtime,omitempty"`
	// Commands are the tools the probe runs.
	Commands []string `json:"commands"`
	// DurationMS is how long the probe took.
	DurationMS int64 `json:"duration_ms"`
	// Detail says what failed and why, or what ran.
	Detail string `json:"detail"`
}

// Report is the result of Run.
type Report struct {
	// Checks are in a fixed order, one per check name.
	Checks []Check `json:"checks"`
	// OK is true when no required check is missing.
	OK bool `json:"ok"`
	// Probes are the backends' functional probes (also in Checks, as probe-BACKEND).
	Probes []Probe `json:"probes"`
}

// Options configures Run.
type Options struct {
	// DataDir is where the overlay test mount is tried (in a temporary directory inside
	// it), so that the test runs on the file system workspaces will use. Empty means
	// os.TempDir().
	DataDir string
	// DockerHost is the engine's address, unix:///path or tcp://host:port. Empty means
	// $DOCKER_HOST, or unix:///var/run/docker.sock when that is unset too.
	DockerHost string
	// ImageCache is where the local backend keeps images unpacked by id (config
	// image_cache). Empty means DefaultImageCache.
	ImageCache string
}

// DefaultImageCache is the local backend's default cache of unpacked images.
const DefaultImageCache = "/var/cache/agentbox/images"

// required lists the checks whose "missing" makes Report.OK false: git, and bubblewrap,
// which confines every host-side git over a workspace (diff, status, commit; see
// gitx.Jail) besides being the local backend's jail. Every other feature has a fallback
// or serves only some backends (the copy driver stands in for overlayfs; the docker and
// gvisor backends need only their own pieces), so its absence is reported but does not
// fail the machine as a whole. "platform" is what an unsupported OS reports.
var required = map[string]bool{
	"git":        true,
	"bubblewrap": true,
	"platform":   true,
}

// Run runs every check and returns the report. It never blocks longer than the slowest
// check's timeout (a few seconds), and returns early with what it has when ctx ends.
func Run(ctx context.Context, opts Options) Report {
	if opts.DataDir == "" {
		opts.DataDir = os.TempDir()
	}
	if opts.DockerHost == "" {
		opts.DockerHost = os.Getenv("DOCKER_HOST")
	}
	if opts.DockerHost == "" {
		opts.DockerHost = defaultDockerHost
	}
	if opts.ImageCache == "" {
		opts.ImageCache = DefaultImageCache
	}
	checks := runChecks(ctx, opts)
	probes := []Probe{}
	for _, c := range checks {
		if c.Probe != nil {
			probes = append(probes, *c.Probe)
		}
	}
	return Report{Checks: checks, OK: reportOK(checks), Probes: probes}
}

const defaultDockerHost = "unix:///var/run/docker.sock"

func reportOK(checks []Check) bool {
	for _, c := range checks {
		if required[c.Name] && c.Status == StatusMissing {
			return false
		}
	}
	return true
}
