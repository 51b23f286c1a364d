package bench

// The load and density benchmarks measure a real daemon: `agentbox serve`
// as a child process on a scratch data dir, reached through the Go client
// on its unix socket, whose memory, file descriptors and goroutines are
// read from /proc and from its /metrics.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// DaemonOptions say which agentbox to run as the measured daemon.
type DaemonOptions struct {
	// Binary is the agentbox binary run as `agentbox serve`. Required.
	Binary string
	// GuestBinary is the static agentbox-guest binary; default
	// agentbox-guest next to Binary.
	GuestBinary string
	// Image is the image of the sandboxes (default DefaultImage); it must
	// be in the engine already.
	Image string
	// DockerHost is the engine's address (default $DOCKER_HOST or the
	// local socket).
	DockerHost string
	// ShutdownGrace is the daemon's shutdown grace (default its own).
	ShutdownGrace time.Duration
	// Store is the daemon's store (a postgres:// URL); empty: the SQLite
	// file in its scratch data dir.
	Store string
	// NodeHeartbeat, NodeShared and WorkspaceDriver set the daemon's
	// node_heartbeat, node_shared and workspace_driver (zero: its own
	// defaults).
	NodeHeartbeat   time.Duration
	NodeShared      bool
	WorkspaceDriver string
	// NoDiskQuota makes workspaces without a disk quota (plain
	// directories, which a node adopts from a lost one).
	NoDiskQuota bool
}

// daemonProc is a running `agentbox serve` on a scratch dir.
type daemonProc struct {
	opts DaemonOptions
	// root is the scratch dir; data the daemon's data dir in it.
	root, data string
	cmd        *exec.Cmd
	logPath    string
	exited     chan struct{}
	waitErr    error
	c          *client.Client
	// metrics reaches the daemon's /metrics on its socket.
	metrics *http.Client

	mu sync.Mutex
	// sandboxes are the IDs of every sandbox the run saw, so that the
	// leak check and close find their containers among other daemons'.
	sandboxes map[string]bool
	// repo is the generated repository, added to the daemon.
	repo string
}

func (o DaemonOptions) withDefaults() (DaemonOptions, error) {
	if o.Binary == "" {
		return o, errors.New("bench: no agentbox binary to run as the daemon")
	}
	if o.GuestBinary == "" {
		o.GuestBinary = filepath.Join(filepath.Dir(o.Binary), "agentbox-guest")
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	for _, p := range []string{o.Binary, o.GuestBinary} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return o, fmt.Errorf("bench: %s: not a regular file (%v)", p, err)
		}
	}
	return o, nil
}

// startDaemon makes a scratch dir with a generated repo of files files
// (none when files is negative: a further node of a cluster, which uses
// the first one's) and starts the daemon on it, with docker as its
// default backend.
func startDaemon(ctx context.Context, opts DaemonOptions, files int, log io.Writer) (_ *daemonProc, err error) {
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	if out, err := dockerCLI(ctx, opts.DockerHost, "image", "inspect", "--format", "{{.Id}}", opts.Image); err != nil {
		return nil, fmt.Errorf("bench: image %s is not in the engine (agentbox image build --kind busybox): %v: %s", opts.Image, err, out)
	}
	d := &daemonProc{opts: opts, exited: make(chan struct{}), sandboxes: map[string]bool{}}
	// Short, so that the socket path fits; resolved, so that mount
	// points under it are found in mountinfo; traversable by the sandbox
	// user, who reaches its run dir through it.
	if d.root, err = os.MkdirTemp("", "agentbox-load-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()
	if d.root, err = filepath.EvalSymlinks(d.root); err != nil {
		return nil, err
	}
	if err := os.Chmod(d.root, 0o711); err != nil {
		return nil, err
	}
	d.data = filepath.Join(d.root, "data")
	src := filepath.Join(d.root, "source.git")
	if files >= 0 {
		if _, _, err := generateRepo(ctx, src, files); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf("data_dir: %s\ndefault_backend: docker\ndefault_image: %s\nguest_binary: %s\nlog_level: warn\n"+
		"sandbox_idle_timeout: 0s\n", d.data, opts.Image, opts.GuestBinary)
	if opts.DockerHost != "" {
		cfg += "docker_host: " + opts.DockerHost + "\n"
	}
	if opts.ShutdownGrace > 0 {
		cfg += "shutdown_grace: " + opts.ShutdownGrace.String() + "\n"
	}
	if opts.Store != "" {
		cfg += "store: " + strconv.Quote(opts.Store) + "\n"
	}
	if opts.NodeHeartbeat > 0 {
		cfg += "node_heartbeat: " + opts.NodeHeartbeat.String() + "\n"
	}
	if opts.NodeShared {
		cfg += "node_shared: true\n"
	}
	if opts.NoDiskQuota {
		cfg += "workspace_disk_quota: 0\n"
	}
	if opts.WorkspaceDriver != "" {
		cfg += "workspace_driver: " + opts.WorkspaceDriver + "\n"
	}
	cfgPath := filepath.Join(d.root, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if err := d.start(ctx, cfgPath); err != nil {
		return nil, err
	}
	if files < 0 {
		return d, nil
	}
	repo, err := d.c.AddRepo(ctx, src, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: adding the generated repo: %w", err)
	}
	d.repo = repo.ID
	if log != nil {
		fmt.Fprintf(log, "daemon pid %d on %s (logs %s)\n", d.cmd.Process.Pid, d.data, d.logPath)
	}
	return d, nil
}

// start runs `agentbox serve` with the config file and waits until it
// answers.
func (d *daemonProc) start(ctx context.Context, cfgPath string) error {
	d.logPath = filepath.Join(d.root, "daemon.log")
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Not CommandContext: the daemon is stopped by close, with SIGTERM,
	// even when ctx has ended, so that it can leave its state in order.
	d.cmd = exec.Command(d.opts.Binary, "serve", "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.Env = append(os.Environ(), "AGENTBOX_DATA="+d.data)
	// Its own process group: a ^C meant for the benchmark reaches the
	// daemon only through close.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return fmt.Errorf("bench: starting %s serve: %w", d.opts.Binary, err)
	}
	d.exited = make(chan struct{})
	go func() { d.waitErr = d.cmd.Wait(); close(d.exited) }()
	sock := filepath.Join(d.data, "agentbox.sock")
	if d.c, err = client.New("unix://"+sock, ""); err != nil {
		return err
	}
	d.metrics = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	}, DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := d.c.Health(ctx); err == nil {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("bench: the daemon exited at start (%v):\n%s", d.waitErr, d.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling for readiness, bounded
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the daemon did not answer within 30s:\n%s", d.logTail())
		}
	}
}

// pid is the daemon's process ID.
func (d *daemonProc) pid() int { return d.cmd.Process.Pid }

// saw records sandbox IDs the run made.
func (d *daemonProc) saw(ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if id != "" {
			d.sandboxes[id] = true
		}
	}
}

// logTail is the end of the daemon's log, for error messages.
func (d *daemonProc) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// rss is the daemon's resident set size, from /proc.
func (d *daemonProc) rss() (int64, error) { return procRSS(d.pid()) }

// procRSS reads VmRSS of a process.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// fds counts the daemon's open file descriptors.
func (d *daemonProc) fds() (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.pid()))
	return len(ents), err
}

// fdTargets lists what the daemon's open file descriptors point at.
func (d *daemonProc) fdTargets() map[string]int {
	dir := fmt.Sprintf("/proc/%d/fd", d.pid())
	ents, _ := os.ReadDir(dir)
	out := map[string]int{}
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		// socket:[123] and pipe:[123] differ per object: count kinds.
		if k, _, ok := strings.Cut(t, ":["); ok {
			t = k
		}
		out[t]++
	}
	return out
}

// scrape reads the named series (without labels) from /metrics.
func (d *daemonProc) scrape(ctx context.Context, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://agentbox/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.metrics.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping the daemon's /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping the daemon's /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("the daemon's /metrics has no %s", n)
		}
	}
	return out, nil
}

// Metric names read from the daemon.
const (
	metricGoroutines = "go_goroutines"
	metricHeapInuse  = "go_memstats_heap_inuse_bytes"
)

// leftovers lists what the run left behind once every object it made
// was removed: workspaces and sandboxes the daemon still knows, containers
// of the run's sandboxes, mounts under the scratch dir, and entries in
// the data dir's workspaces and sandboxes directories.
func (d *daemonProc) leftovers(ctx context.Context) ([]string, error) {
	var left []string
	wss, err := d.c.ListWorkspaces(ctx, "", "")
	if err != nil {
		return nil, err
	}
	for _, w := range wss {
		left = append(left, "workspace "+w.ID)
	}
	sbs, err := d.c.ListSandboxes(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		left = append(left, "sandbox row "+sb.ID+" ("+sb.State+")")
	}
	ctrs, err := d.containers(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		left = append(left, "container "+c)
	}
	local, err := d.localLeftovers()
	return append(left, local...), err
}

// localLeftovers is what the run left in the daemon's scratch dir:
// mounts, and entries in the data dir's workspaces and sandboxes
// directories.
func (d *daemonProc) localLeftovers() ([]string, error) {
	var left []string
	mounts, err := mountsUnder(d.root)
	if err != nil {
		return nil, err
	}
	for _, mp := range mounts {
		left = append(left, "mount "+mp)
	}
	// locks/ is left out: it holds one lock file per repo and per
	// pristine checkout, as long-lived as they are.
	for _, sub := range []string{"workspaces", "sandboxes"} {
		ents, err := os.ReadDir(filepath.Join(d.data, sub))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for _, e := range ents {
			left = append(left, "dir entry "+filepath.Join(sub, e.Name()))
		}
	}
	return left, nil
}

// containers lists the containers (any state) of the run's sandboxes as
// "ID (sandbox)", the ID shortened.
func (d *daemonProc) containers(ctx context.Context) ([]string, error) {
	ids, sbs, err := d.runContainers(ctx)
	var mine []string
	for i, id := range ids {
		mine = append(mine, id[:min(12, len(id))]+" ("+sbs[i]+")")
	}
	return mine, err
}

// runContainers lists the full IDs of the run's containers (any state)
// and their sandboxes.
func (d *daemonProc) runContainers(ctx context.Context) (ids, sbs []string, err error) {
	out, err := dockerCLI(ctx, d.opts.DockerHost, "ps", "-a", "--no-trunc", "--filter", "label="+sandbox.LabelManaged+"=1",
		"--format", `{{.ID}} {{.Label "`+sandbox.LabelSandbox+`"}}`)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: listing containers: %v: %s", err, out)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if id, sb, _ := strings.Cut(line, " "); d.sandboxes[sb] {
			ids, sbs = append(ids, id), append(sbs, sb)
		}
	}
	return ids, sbs, nil
}

// removeAll removes every workspace (and so every sandbox) the daemon
// knows, n at a time.
func (d *daemonProc) removeAll(ctx context.Context, n int) error {
	wss, err := d.c.ListWorkspaces(ctx, "", "")
	if err != nil {
		return err
	}
	sem := make(chan struct{}, n)
	return parallel(len(wss), func(i int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		if err := d.c.RemoveWorkspace(ctx, wss[i].ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("bench: removing workspace %s: %w", wss[i].ID, err)
		}
		return nil
	})
}

// stop sends SIGTERM and waits for the daemon to exit, killing it after
// wait.
func (d *daemonProc) stop(wait time.Duration) error {
	select {
	case <-d.exited:
		return nil
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		if d.waitErr != nil {
			return fmt.Errorf("bench: the daemon's exit after SIGTERM: %v:\n%s", d.waitErr, d.logTail())
		}
		return nil
	case <-time.After(wait):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("bench: the daemon did not stop within %s of SIGTERM", wait)
	}
}

// close removes everything of the run: every workspace through the
// daemon, the daemon, then whatever is still left (containers of the
// run's sandboxes, mounts) and the scratch dir. Its deadline grows with
// the number of sandboxes the run made.
func (d *daemonProc) close() error {
	d.mu.Lock()
	n := len(d.sandboxes)
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), max(5*time.Minute, teardownDeadline(n)+2*time.Minute))
	defer cancel()
	var errs []error
	if d.cmd != nil && d.cmd.Process != nil {
		select {
		case <-d.exited:
		default:
			errs = append(errs, d.removeAll(ctx, teardownParallel))
			if d.repo != "" {
				if _, err := d.c.RemoveRepo(ctx, d.repo, true); err != nil {
					errs = append(errs, err)
				}
			}
			errs = append(errs, d.stop(time.Minute))
		}
	}
	if ctrs, err := d.containers(ctx); err != nil {
		errs = append(errs, err)
	} else if len(ctrs) > 0 {
		errs = append(errs, fmt.Errorf("bench: containers left after every workspace was removed: %s", strings.Join(ctrs, ", ")))
		args := []string{"rm", "-f"}
		for _, c := range ctrs {
			id, _, _ := strings.Cut(c, " ")
			args = append(args, id)
		}
		if out, err := dockerCLI(ctx, d.opts.DockerHost, args...); err != nil {
			errs = append(errs, fmt.Errorf("bench: removing containers: %v: %s", err, out))
		}
	}
	if d.root == "" {
		return errors.Join(errs...)
	}
	left, err := mountsUnder(d.root)
	errs = append(errs, err)
	for _, mp := range left {
		detach(mp)
	}
	if again, _ := mountsUnder(d.root); len(again) > 0 {
		return errors.Join(append(errs, fmt.Errorf("bench: mounts left under %s: %s", d.root, strings.Join(again, ", ")))...)
	}
	errs = append(errs, os.RemoveAll(d.root))
	d.root = ""
	return errors.Join(errs...)
}

// dockerCLI runs the docker CLI and returns its combined output.
func dockerCLI(ctx context.Context, host string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	if host != "" {
		cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
