package bench

// The execution benchmarks (exec.go, create.go, concurrent.go) share one
// environment: a manager over a scratch data dir with the real backends
// and the real guest, an API server on a unix socket in front of it, and
// the docker CLI for the baselines. Everything they make carries the run's
// label or lives under the scratch dir, so that close removes it all, also
// after an error or a cancellation.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/workspace"
)

// Backend names, in the order they are measured and printed.
const (
	BackendDocker = docker.NameDocker
	BackendGVisor = docker.NameGVisor
	BackendLocal  = local.Name
	// BackendHost labels rows measured on the host itself.
	BackendHost = "host"
)

// AllBackends are the backends the execution benchmarks know.
var AllBackends = []string{BackendDocker, BackendGVisor, BackendLocal}

// DefaultImage is the image sandboxes and baseline containers run.
const DefaultImage = "agentbox/busybox:latest"

// LabelBench marks every baseline container with the run's id, so that
// close finds them even when the docker CLI that started one was killed.
const LabelBench = "agentbox.bench"

// SandboxOptions configure the execution benchmarks. Zero fields take
// their defaults.
type SandboxOptions struct {
	// Backends to measure; default every one of AllBackends that works
	// here. A backend named here that does not work is an error.
	Backends []string
	// Image is what sandboxes and baseline containers run (default
	// DefaultImage). agentbox/busybox:latest and agentbox/debian:bookworm
	// are built (engine image and local root file system) when missing.
	Image string
	// Runs is the number of measured runs per case; default per benchmark.
	Runs int
	// Concurrency is how many sandboxes the concurrent benchmark starts at
	// once (default 16).
	Concurrency int
	// GuestBinary is the static agentbox-guest binary. Required.
	GuestBinary string
	// Binary is the agentbox binary, run as `agentbox mcp` by the mcp
	// benchmark (required there).
	Binary string
	// ImagesDir holds the local backend's unpacked root file systems
	// (DATA/images); default a directory in the scratch dir.
	ImagesDir string
	// DockerHost is the engine's address (default $DOCKER_HOST or the
	// local socket). The docker CLI of the baselines is pointed at it too.
	DockerHost string
	// Kubeconfig is the cluster of the kubernetes backend, measured only
	// when named in Backends.
	Kubeconfig string
	// NoDockerExec leaves the docker exec baseline out of the exec
	// benchmark's rounds: its work in dockerd and containerd goes on after
	// it returns, into whichever case comes next.
	NoDockerExec bool
	// Profile is the number of extra, instrumented create→first exec runs
	// per backend whose steps are timed (create benchmark only; 0: none).
	Profile int
	// EgressImage is what the egress benchmark's sandboxes run: it needs
	// python3 (default DefaultEgressImage).
	EgressImage string
	// EgressBytes is the size of the egress benchmark's download (default
	// DefaultEgressBytes).
	EgressBytes int64
	// EgressRequests is how many requests each of the egress benchmark's
	// small-request cases makes (default DefaultEgressRequests).
	EgressRequests int

	// E2BSDK is a directory with node_modules/e2b, the SDK the e2b
	// benchmark drives (installed there when missing; default
	// DefaultE2BSDKDir).
	E2BSDK string

	// warmPool is the manager's warm pools (the pool benchmark's).
	warmPool []manager.PoolSpec
}

// Defaults of the execution benchmarks.
const (
	DefaultExecRuns       = 30
	DefaultCreateRuns     = 10
	DefaultConcurrentRuns = 3
	DefaultConcurrency    = 16
)

// Row is one measured case.
type Row struct {
	// Backend is docker, gvisor, local, or host.
	Backend string `json:"backend"`
	// Case names what was timed, e.g. "agentbox exec (API)" or the
	// baseline's command line.
	Case string `json:"case"`
	// Baseline is set on the rows agentbox is compared with.
	Baseline bool          `json:"baseline"`
	Runs     int           `json:"runs"`
	Median   time.Duration `json:"median_ns"`
	P90      time.Duration `json:"p90_ns"`
	// Bytes, when set, is what one run moved: the row's rate is its
	// throughput at the median.
	Bytes int64 `json:"bytes,omitempty"`
	// Ops, when set, is how many operations one run made: the row's rate
	// is the median time per operation.
	Ops int `json:"ops,omitempty"`
}

// Check compares two rows' medians, or one row's median with a bound.
type Check struct {
	// Name says what is compared.
	Name string `json:"name"`
	// Ratio is median(Num)/median(Den) for a ratio check; Value is the
	// median for an absolute one.
	Ratio float64       `json:"ratio,omitempty"`
	Value time.Duration `json:"value_ns,omitempty"`
	// Target is the goal, e.g. ">= 20x" or "<= 3 ms"; empty for a ratio
	// reported without a goal.
	Target string `json:"target,omitempty"`
	// Met says whether Target holds (false without a target).
	Met bool `json:"met"`
}

// SandboxResult is what one execution benchmark measured.
type SandboxResult struct {
	// Benchmark is "exec", "create" or "concurrent".
	Benchmark   string   `json:"benchmark"`
	Image       string   `json:"image"`
	Backends    []string `json:"backends"`
	Runs        int      `json:"runs"`
	Concurrency int      `json:"concurrency,omitempty"`
	Rows        []Row    `json:"rows"`
	Checks      []Check  `json:"checks"`
	// Notes say what a row stands for where its name cannot.
	Notes []string `json:"notes,omitempty"`
	// Profiles are the create→first exec breakdowns, one per backend.
	Profiles []Profile `json:"profiles,omitempty"`
}

func (o SandboxOptions) withDefaults(runs int) SandboxOptions {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Runs == 0 {
		o.Runs = runs
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.EgressImage == "" {
		o.EgressImage = DefaultEgressImage
	}
	if o.EgressBytes == 0 {
		o.EgressBytes = DefaultEgressBytes
	}
	if o.EgressRequests == 0 {
		o.EgressRequests = DefaultEgressRequests
	}
	return o
}

func (o SandboxOptions) validate() error {
	if o.Runs < 1 || o.Concurrency < 1 || o.Profile < 0 {
		return fmt.Errorf("bench: runs (%d) and concurrency (%d) must be positive, profile (%d) not negative", o.Runs, o.Concurrency, o.Profile)
	}
	if o.EgressBytes < 1 || o.EgressRequests < 1 {
		return fmt.Errorf("bench: egress download size (%d) and requests (%d) must be positive", o.EgressBytes, o.EgressRequests)
	}
	if o.GuestBinary == "" {
		return errors.New("bench: no agentbox-guest binary (build it: CGO_ENABLED=0 go build -o agentbox-guest ./cmd/agentbox-guest)")
	}
	if fi, err := os.Stat(o.GuestBinary); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("bench: agentbox-guest binary %s: not a regular file (%v)", o.GuestBinary, err)
	}
	for _, b := range o.Backends {
		if !knownBackend(b) {
			return fmt.Errorf("bench: unknown backend %q (known: %s, %s)", b, strings.Join(AllBackends, ", "), BackendKubernetes)
		}
	}
	return nil
}

// sandboxUID is the sandbox user: the one the agentbox images make.
const sandboxUID = image.DefaultUID

// env is the environment of one benchmark run.
type env struct {
	log      io.Writer
	opts     SandboxOptions
	root     string // scratch dir, removed by close
	runID    string // value of LabelBench
	st       store.Store
	db       *sqlstore.Store
	m        *manager.Manager
	bes      map[string]sandbox.Backend
	backends []string // measured, in AllBackends order
	closers  []func() error
	srv      *http.Server
	c        *client.Client // the API over the unix socket
	repo     store.Repo
	rootfs   string // the local backend's root file system, if local is measured
	// docker is the docker CLI's environment ("" when there is no CLI or
	// engine: no docker baselines).
	docker   []string
	dockerOK bool
	prof     *recorder // set in a profiling env
	// noWarmup skips the untimed warm-up runs (tests, which time nothing).
	noWarmup bool
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, "bench: "+format+"\n", args...)
}

// newEnv builds the environment. With prof set, the store, the backends
// and the engine connection are instrumented (see profile.go).
func newEnv(ctx context.Context, opts SandboxOptions, log io.Writer, prof *recorder) (_ *env, err error) {
	if log == nil {
		log = io.Discard
	}
	e := &env{log: log, opts: opts, bes: map[string]sandbox.Backend{}, prof: prof}
	var rb [6]byte
	rand.Read(rb[:])
	e.runID = hex.EncodeToString(rb[:])
	if e.root, err = os.MkdirTemp("", "agentbox-bench-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	// Resolve symlinks so that mount points under root are found in
	// mountinfo; the sandbox user must traverse it to reach run dirs.
	if e.root, err = filepath.EvalSymlinks(e.root); err != nil {
		return nil, err
	}
	if err := os.Chmod(e.root, 0o711); err != nil {
		return nil, err
	}
	if e.opts.ImagesDir == "" {
		e.opts.ImagesDir = filepath.Join(e.root, "images")
	}
	e.docker = os.Environ()
	if e.opts.DockerHost != "" {
		e.docker = append(e.docker, "DOCKER_HOST="+e.opts.DockerHost)
	}
	e.dockerOK = e.dockerAnswers(ctx)

	if err := e.openBackends(ctx); err != nil {
		return nil, err
	}
	if e.rootfs, err = e.ensureImage(ctx, e.opts.Image); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(e.root, "data")
	if err := os.Mkdir(dataDir, 0o711); err != nil {
		return nil, err
	}
	if e.db, err = sqlstore.Open(ctx, filepath.Join(dataDir, "agentbox.db")); err != nil {
		return nil, err
	}
	e.st = e.db
	if prof != nil {
		e.st = &timedStore{Store: e.db, r: prof}
	}
	// The egress proxy, as the daemon has it, except that its resolver
	// knows only UpstreamHost and 127.0.0.1 is let through, for the egress
	// benchmark's upstreams. Sandboxes without an allowlist never use it.
	var mgr atomic.Pointer[manager.Manager]
	proxy := egress.New(egress.Options{
		Resolver:  upstreamResolver{},
		AllowAddr: func(a netip.Addr) bool { return a == upstreamAddr },
		OnDecision: func(d egress.Decision) {
			if m := mgr.Load(); m != nil {
				m.RecordEgress(manager.EgressDecision(d))
			}
		},
	})
	e.m, err = manager.New(ctx, e.st, manager.Config{
		DataDir: dataDir, Driver: workspace.Overlay, UID: sandboxUID, GID: sandboxUID,
		Backends: e.bes, DefaultBackend: e.backends[0], DefaultImage: e.opts.Image, GuestBinary: e.opts.GuestBinary,
		Egress: proxy, WarmPool: opts.warmPool,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	mgr.Store(e.m)
	src := filepath.Join(e.root, "source.git")
	if _, _, err := generateRepo(ctx, src, 20); err != nil {
		return nil, err
	}
	if e.repo, _, err = e.m.AddRepo(ctx, src, nil); err != nil {
		return nil, fmt.Errorf("bench: adding repo: %w", err)
	}
	if err := e.serveAPI(); err != nil {
		return nil, err
	}
	e.logf("backends %s, image %s, scratch %s", strings.Join(e.backends, ", "), e.opts.Image, e.root)
	return e, nil
}

// dockerAnswers says whether the docker CLI reaches an engine.
func (e *env) dockerAnswers(ctx context.Context) bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := e.dockerOut(cctx, "version", "--format", "{{.Server.Version}}")
	return err == nil
}

// dockerRuntimes lists the engine's OCI runtimes.
func (e *env) dockerRuntimes(ctx context.Context) string {
	out, _ := e.dockerOut(ctx, "info", "--format", "{{json .Runtimes}}")
	return out
}

func (e *env) dockerCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = e.docker
	return cmd
}

func (e *env) dockerOut(ctx context.Context, args ...string) (string, error) {
	var stderr strings.Builder
	cmd := e.dockerCmd(ctx, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// openBackends builds the backends asked for, or every one that works.
func (e *env) openBackends(ctx context.Context) error {
	want := e.opts.Backends
	explicit := len(want) > 0
	if !explicit {
		want = AllBackends
	}
	var why []string
	for _, name := range append(append([]string{}, AllBackends...), BackendKubernetes) {
		if !slices.Contains(want, name) {
			continue
		}
		be, closeFn, err := e.openBackend(ctx, name)
		if err != nil {
			if explicit {
				return fmt.Errorf("bench: backend %s: %w", name, err)
			}
			why = append(why, fmt.Sprintf("%s (%v)", name, err))
			continue
		}
		if e.prof != nil {
			be = &timedBackend{Backend: be, r: e.prof}
		}
		e.bes[name] = be
		e.backends = append(e.backends, name)
		e.closers = append(e.closers, closeFn)
	}
	for _, w := range why {
		e.logf("skipping backend %s", w)
	}
	if len(e.backends) == 0 {
		return fmt.Errorf("bench: no backend works here: %s", strings.Join(why, "; "))
	}
	return nil
}

func (e *env) openBackend(ctx context.Context, name string) (sandbox.Backend, func() error, error) {
	switch name {
	case BackendDocker, BackendGVisor:
		if !e.dockerOK {
			return nil, nil, errors.New("no docker CLI or engine for the baselines")
		}
		runtime := docker.RuntimeRunc
		if name == BackendGVisor {
			runtime = docker.RuntimeRunsc
			if !strings.Contains(e.dockerRuntimes(ctx), `"runsc"`) {
				return nil, nil, errors.New("the engine has no runsc runtime (scripts/setup.sh registers it)")
			}
		}
		host := e.opts.DockerHost
		if e.prof != nil {
			h, err := e.prof.dockerProxy(e.root, host)
			if err != nil {
				return nil, nil, err
			}
			host = h
		}
		b, err := docker.New(docker.Options{Name: name, Runtime: runtime, Host: host, MountDir: filepath.Join(e.root, "binds", name)})
		if err != nil {
			return nil, nil, err
		}
		if _, err := b.List(ctx, map[string]string{sandbox.LabelManaged: "1"}); err != nil {
			b.Close()
			return nil, nil, err
		}
		return b, b.Close, nil
	case BackendKubernetes:
		return e.openKubernetes(ctx)
	case BackendLocal:
		var log *slog.Logger
		if e.prof != nil {
			log = slog.New(e.prof.logHandler())
		}
		b, err := local.New(local.Options{StateDir: filepath.Join(e.root, "local"), ImagesDir: e.opts.ImagesDir, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return b, b.Close, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q", name)
}

// ensureImage builds the image name (engine and, for local, root file
// system) when it is one of agentbox's own and missing or stale. It
// returns the local backend's root file system of it, if local is
// measured.
func (e *env) ensureImage(ctx context.Context, name string) (rootfs string, _ error) {
	var kind image.Kind
	for _, k := range []image.Kind{image.KindBusybox, image.KindDebian} {
		if name == image.DefaultName(k) {
			kind = k
		}
	}
	needLocal := slices.Contains(e.backends, BackendLocal)
	if kind == "" {
		// Someone else's image: it must be there already.
		if e.dockerOK {
			if _, err := e.dockerOut(ctx, "image", "inspect", "--format", "{{.Id}}", name); err != nil {
				return "", fmt.Errorf("bench: image %s is not in the engine and is not one agentbox builds: %w", name, err)
			}
		}
		if needLocal {
			rootfs = filepath.Join(e.opts.ImagesDir, name, "rootfs")
		}
		return rootfs, nil
	}
	opts := image.BuildOptions{Kind: kind, Name: name, Progress: e.log, NoEngine: !e.dockerOK, UID: sandboxUID, GID: sandboxUID}
	if needLocal {
		opts.RootfsDir = filepath.Join(e.opts.ImagesDir, string(kind), "rootfs")
	}
	if opts.NoEngine && opts.RootfsDir == "" {
		return "", nil
	}
	if _, err := image.Build(ctx, opts); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return opts.RootfsDir, nil
}

// serveAPI starts the API in this process on a unix socket, as `agentbox
// serve` does (with /mcp), and a client of it.
func (e *env) serveAPI() error {
	sock := filepath.Join(e.root, "agentbox.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	// MCP's streamable HTTP at /mcp, as the daemon serves it.
	mcpHTTP := mcpserver.New(mcpserver.ManagerBackend(e.m), mcpserver.Options{}).HTTPHandler()
	e.srv = &http.Server{Handler: api.New(e.m, api.Options{MCP: mcpHTTP}), ReadHeaderTimeout: 10 * time.Second}
	e.srv.RegisterOnShutdown(mcpHTTP.Shutdown)
	go e.srv.Serve(ln)
	e.c, err = client.New("unix://"+sock, "")
	return err
}

// workspace creates a workspace of the generated repo.
func (e *env) workspace(ctx context.Context) (store.Workspace, error) {
	w, err := e.m.CreateWorkspace(ctx, manager.CreateRequest{Repo: e.repo.ID, Task: "bench"})
	if err != nil {
		return w, fmt.Errorf("bench: creating a workspace: %w", err)
	}
	return w, nil
}

// execTrue runs `true` in target through the manager.
func (e *env) execTrue(ctx context.Context, target string) error {
	return e.execOK(ctx, target, execTrueReq)
}

// execOK runs req in target through the manager, its output discarded,
// and fails unless it exits 0.
func (e *env) execOK(ctx context.Context, target string, req guest.ExecRequest) error {
	res, err := e.m.Exec(ctx, target, req, nil, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Signal != 0 {
		return fmt.Errorf("%s in %s: exit %d signal %d", req.Argv[0], target, res.ExitCode, res.Signal)
	}
	return nil
}

// dockerLimitArgs are the docker run flags of a container equivalent to a
// sandbox of the docker backend (internal/backend/docker/config.go): same
// user, capabilities, root, /tmp, network and limits.
func dockerLimitArgs(runID, runtime string) []string {
	l := sandbox.DefaultLimits
	args := []string{
		"--label", LabelBench + "=" + runID,
		"--user", fmt.Sprintf("%d:%d", sandboxUID, sandboxUID),
		"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
		"--tmpfs", fmt.Sprintf("/tmp:rw,nosuid,nodev,exec,size=%d,mode=1777", l.TmpBytes),
		"--network", "none", "--ipc", "private", "--cgroupns", "private",
		"--memory", strconv.FormatInt(l.MemoryBytes, 10), "--memory-swap", strconv.FormatInt(l.MemoryBytes, 10),
		"--cpus", strconv.FormatFloat(l.CPUs, 'f', -1, 64), "--pids-limit", strconv.FormatInt(l.Pids, 10),
		"--log-opt", "max-size=1m", "--log-opt", "max-file=1",
	}
	if runtime != "" {
		args = append(args, "--runtime", runtime)
	}
	return args
}

// runtimeOf is the OCI runtime of a backend's docker baselines: runsc
// for gvisor, runc for docker and local.
func runtimeOf(backend string) string {
	if backend == BackendGVisor {
		return docker.RuntimeRunsc
	}
	return docker.RuntimeRunc
}

// runtimeBackend names the rows of a runtime's docker baselines: runc's
// are docker's (local is compared with them too), runsc's gvisor's.
func runtimeBackend(runtime string) string {
	if runtime == docker.RuntimeRunsc {
		return BackendGVisor
	}
	return BackendDocker
}

// dockerRun runs `docker run --rm ... IMAGE true` with the sandbox's
// flags and the workspace files bound at /workspace.
func (e *env) dockerRun(ctx context.Context, runtime, files string) error {
	args := append([]string{"run", "--rm"}, dockerLimitArgs(e.runID, runtime)...)
	args = append(args, "-v", files+":/workspace", e.opts.Image, "true")
	if out, err := e.dockerCmd(ctx, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker run: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// close removes everything the run made: the API server, sandboxes,
// workspaces, baseline containers, backends, the store and the scratch
// dir. It reports mounts left under the scratch dir and never deletes
// through one.
func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if e.srv != nil {
		errs = append(errs, e.srv.Shutdown(ctx))
		e.srv = nil
	}
	if e.m != nil {
		errs = append(errs, e.m.StopPool(ctx))
		sbs, err := e.m.ListSandboxes(ctx, "")
		errs = append(errs, err)
		for _, sb := range sbs {
			errs = append(errs, e.m.RemoveSandbox(ctx, sb.ID))
		}
		wss, err := e.m.ListWorkspaces(ctx, manager.ListFilter{})
		errs = append(errs, err)
		for _, w := range wss {
			errs = append(errs, e.m.RemoveWorkspace(ctx, w.ID))
		}
		e.m = nil
	}
	if e.dockerOK {
		if ids, err := e.dockerOut(ctx, "ps", "-aq", "--filter", "label="+LabelBench+"="+e.runID); err == nil && ids != "" {
			args := append([]string{"rm", "-f"}, strings.Fields(ids)...)
			if _, err := e.dockerOut(ctx, args...); err != nil {
				errs = append(errs, err)
			}
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	e.closers = nil
	if e.db != nil {
		errs = append(errs, e.db.Close())
		e.db = nil
	}
	if e.prof != nil {
		errs = append(errs, e.prof.close())
	}
	if e.root == "" {
		return errors.Join(errs...)
	}
	left, err := mountsUnder(e.root)
	errs = append(errs, err)
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("bench: mounts left under %s: %s", e.root, strings.Join(left, ", ")))
		for i := len(left) - 1; i >= 0; i-- {
			detach(left[i])
		}
		if again, _ := mountsUnder(e.root); len(again) > 0 {
			return errors.Join(errs...)
		}
	}
	errs = append(errs, os.RemoveAll(e.root))
	e.root = ""
	return errors.Join(errs...)
}

// --- measuring

// tcase is one measured case: run is timed; the undo it returns is not.
type tcase struct {
	backend  string
	name     string
	baseline bool
	run      func(ctx context.Context) (undo func() error, err error)
	// timed, when set instead of run, times itself: what it returns is
	// the case's time (a client that reports how long its own requests
	// took, without its start).
	timed func(ctx context.Context) (time.Duration, error)
	// bytes and ops go to the row (see Row).
	bytes int64
	ops   int
}

// measure runs every case warmup times untimed, then runs times each,
// every round in an order shuffled per round (fixed seed) so that drift of
// the machine, position in the round and the case run just before favour
// none. settle runs after each undo (e.g. quiesce); it may be nil.
func (e *env) measure(ctx context.Context, cases []tcase, warmup, runs int, settle func()) ([]Row, error) {
	once := func(c tcase) (time.Duration, error) {
		if c.timed != nil {
			d, err := c.timed(ctx)
			if err != nil {
				return d, fmt.Errorf("bench: %s %s: %w", c.backend, c.name, err)
			}
			if settle != nil {
				settle()
			}
			return d, nil
		}
		start := time.Now()
		undo, err := c.run(ctx)
		d := time.Since(start)
		if undo != nil {
			if uerr := undo(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up: %w", uerr))
			}
		}
		if err != nil {
			return d, fmt.Errorf("bench: %s %s: %w", c.backend, c.name, err)
		}
		if settle != nil {
			settle()
		}
		return d, nil
	}
	if e.noWarmup {
		warmup = 0
	}
	for range warmup {
		for _, c := range cases {
			if _, err := once(c); err != nil {
				return nil, err
			}
		}
	}
	times := make([][]time.Duration, len(cases))
	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var line strings.Builder
		for _, k := range rng.Perm(len(cases)) {
			d, err := once(cases[k])
			if err != nil {
				return nil, err
			}
			times[k] = append(times[k], d)
			fmt.Fprintf(&line, " %s/%s=%s", cases[k].backend, cases[k].name, fmtDur(d))
		}
		if len(cases) <= 4 || (i+1)%10 == 0 || i+1 == runs {
			e.logf("run %d/%d:%s", i+1, runs, line.String())
		}
	}
	rows := make([]Row, len(cases))
	for i, c := range cases {
		s := summarize(c.name, times[i])
		rows[i] = Row{Backend: c.backend, Case: c.name, Baseline: c.baseline, Runs: s.Runs, Median: s.Median, P90: s.P90, Bytes: c.bytes, Ops: c.ops}
	}
	return rows, nil
}

// row finds a measured row.
func row(rows []Row, backend, name string) (Row, bool) {
	for _, r := range rows {
		if r.Backend == backend && r.Case == name {
			return r, true
		}
	}
	return Row{}, false
}

// ratioCheck compares num's median with den's: num/den, against
// "<= max" (max > 0) or ">= min" (min > 0), or no target.
func ratioCheck(name string, num, den Row, atMost, atLeast float64) Check {
	c := Check{Name: name}
	if den.Median <= 0 {
		return c
	}
	c.Ratio = float64(num.Median) / float64(den.Median)
	switch {
	case atMost > 0:
		c.Target, c.Met = fmt.Sprintf("<= %gx", atMost), c.Ratio <= atMost
	case atLeast > 0:
		c.Target, c.Met = fmt.Sprintf(">= %gx", atLeast), c.Ratio >= atLeast
	}
	return c
}

// boundCheck compares a row's median with an upper bound.
func boundCheck(name string, r Row, bound time.Duration) Check {
	return Check{Name: name, Value: r.Median, Target: "<= " + fmtDur(bound), Met: r.Median <= bound}
}

// --- output

// Print writes the rows, the checks and the profiles as tables.
func (r SandboxResult) Print(w io.Writer) {
	title := map[string]string{
		"exec":       "exec round trip (`true` in a running sandbox)",
		"create":     "create → first exec (`true`)",
		"e2b":        "the E2B endpoint through the official E2B SDK vs the same through /v1",
		"concurrent": fmt.Sprintf("%d sandboxes created at once, each running `true` (wall time of all)", r.Concurrency),
		"egress":     "HTTP(S) from inside a sandbox through the egress proxy vs the same client on the host, direct",
		"pool":       "claim from a warm pool → first exec (`true`) vs cold create → first exec",
		"mcp":        "MCP tool call round trip (run_command `true` in a running sandbox) vs the same exec through /v1",
		"suite":      "a real test suite (part of networkx's own, pytest) in a sandbox vs on the host",
	}[r.Benchmark]
	fmt.Fprintf(w, "agentbox bench %s: %s\nimage %s, %d runs per case, cases interleaved in shuffled rounds\n\n", r.Benchmark, title, r.Image, r.Runs)
	width := len("case")
	for _, x := range r.Rows {
		width = max(width, len(x.Case))
	}
	rates := slices.ContainsFunc(r.Rows, func(x Row) bool { return x.Bytes > 0 || x.Ops > 0 })
	fmt.Fprintf(w, "%-8s %-*s %5s %11s %11s", "backend", width, "case", "runs", "median", "p90")
	if rates {
		fmt.Fprintf(w, " %13s", "rate")
	}
	fmt.Fprintln(w)
	for _, x := range r.Rows {
		fmt.Fprintf(w, "%-8s %-*s %5d %11s %11s", x.Backend, width, x.Case, x.Runs, fmtDur(x.Median), fmtDur(x.P90))
		if rates {
			fmt.Fprintf(w, " %13s", x.rate())
		}
		fmt.Fprintln(w)
	}
	if len(r.Checks) > 0 {
		cw := len("check")
		for _, c := range r.Checks {
			cw = max(cw, len(c.Name))
		}
		fmt.Fprintf(w, "\n%-*s %11s  %-10s %s\n", cw, "check", "value", "target", "")
		for _, c := range r.Checks {
			v := fmtDur(c.Value)
			if c.Value == 0 {
				v = fmtRatio(c.Ratio)
			}
			met := ""
			if c.Target != "" {
				met = verdict(c.Met)
			}
			fmt.Fprintf(w, "%-*s %11s  %-10s %s\n", cw, c.Name, v, c.Target, met)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s", n)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, p := range r.Profiles {
		fmt.Fprintln(w)
		p.Print(w)
	}
}

// rate is a row's throughput or time per operation at its median.
func (x Row) rate() string {
	switch {
	case x.Median <= 0:
		return ""
	case x.Bytes > 0:
		return fmt.Sprintf("%.1f MB/s", float64(x.Bytes)/1e6/x.Median.Seconds())
	case x.Ops > 0:
		return fmtDur(x.Median/time.Duration(x.Ops)) + "/op"
	}
	return ""
}

func fmtRatio(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v):
		return "n/a"
	case v >= 10:
		return fmt.Sprintf("%.1fx", v)
	default:
		return fmt.Sprintf("%.2fx", v)
	}
}

// AllResult is what All measured.
type AllResult struct {
	Exec       SandboxResult `json:"exec"`
	Create     SandboxResult `json:"create"`
	Concurrent SandboxResult `json:"concurrent"`
}

// All runs Exec, Create and Concurrent in one environment; opts.Runs, if
// set, applies to each, else each takes its own default.
func All(ctx context.Context, opts SandboxOptions, log io.Writer) (res AllResult, err error) {
	runs := opts.Runs
	opts = opts.withDefaults(DefaultExecRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := e.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err == nil && opts.Profile > 0 {
			res.Create.Profiles, err = profile(ctx, opts, log)
		}
	}()
	for _, b := range []struct {
		def int
		run func(context.Context) (SandboxResult, error)
		out *SandboxResult
	}{
		{DefaultExecRuns, e.execBench, &res.Exec},
		{DefaultCreateRuns, e.createBench, &res.Create},
		{DefaultConcurrentRuns, e.concurrentBench, &res.Concurrent},
	} {
		e.opts.Runs = runs
		if runs == 0 {
			e.opts.Runs = b.def
		}
		if *b.out, err = b.run(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Print writes the three results.
func (r AllResult) Print(w io.Writer) {
	r.Exec.Print(w)
	fmt.Fprintln(w)
	r.Create.Print(w)
	fmt.Fprintln(w)
	r.Concurrent.Print(w)
}
