package bench

// Load runs many clients against one real daemon for a bounded time and
// checks that the daemon holds: no request fails, its memory stays flat,
// and once every object the clients made is removed nothing is left of
// them (no container, mount, directory, file descriptor or goroutine).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Defaults of the load benchmark.
const (
	DefaultLoadClients  = 32
	DefaultLoadDuration = 5 * time.Minute
)

// Flatness and leak thresholds of the load benchmark.
const (
	// MemoryGrowthRatio and MemoryGrowthSlack bound memory growth: the
	// median of the last third of the samples (RSS, and Go heap in use)
	// may be at most ratio x the first third's median + slack. The first
	// tenth of the run (clients ramping up, first containers) is left out
	// of the thirds.
	MemoryGrowthRatio = 1.25
	MemoryGrowthSlack = 16 << 20
	// FDSlack and GoroutineSlack are what the daemon may hold above its
	// baseline once everything is removed: idle kept-alive connections to
	// the container engine (one fd and two goroutines each), which its
	// HTTP client keeps up to a small bound and closes after 90 s.
	FDSlack        = 4
	GoroutineSlack = 8
	// PeerIdleConns is what a node of several may keep, per other node,
	// above that: idle forwarding connections it keeps to the peer (one
	// fd and two goroutines each) and those the peer keeps to it (one fd
	// and one goroutine each), api.ForwardIdleConns of each.
	PeerIdleConns = 4
)

// LoadOptions configure Load. Zero fields take their defaults.
type LoadOptions struct {
	DaemonOptions
	// Clients is the number of concurrent clients (default 32).
	Clients int
	// Duration is how long clients start new cycles (default 5m); a
	// cycle started before the end runs to its end.
	Duration time.Duration
	// SampleEvery is the memory sampling interval (default 1s).
	SampleEvery time.Duration
	// Nodes is the number of daemons (default 1): more than one share
	// Store (required then), each on its own data dir, and client i
	// talks to node i mod Nodes, which forwards what another node owns.
	// Memory, fds and goroutines are the first node's.
	Nodes int
}

// LoadOp is one operation's latencies.
type LoadOp struct {
	Op     string        `json:"op"`
	Count  int           `json:"count"`
	Errors int           `json:"errors"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

// LoadSample is one reading of the daemon's memory.
type LoadSample struct {
	At         time.Duration `json:"at_ns"`
	RSS        int64         `json:"rss_bytes"`
	HeapInuse  int64         `json:"heap_inuse_bytes"`
	Goroutines int           `json:"goroutines"`
	FDs        int           `json:"fds"`
}

// LoadCheck is one requirement and whether it held.
type LoadCheck struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target"`
	Met    bool   `json:"met"`
}

// LoadResult is what Load measured.
type LoadResult struct {
	Clients  int           `json:"clients"`
	Nodes    int           `json:"nodes,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Image    string        `json:"image"`
	// Cycles is the number of full client cycles run.
	Cycles int      `json:"cycles"`
	Ops    []LoadOp `json:"ops"`
	// Errors are the first failures, each naming its operation.
	Errors     []string `json:"errors,omitempty"`
	ErrorCount int      `json:"error_count"`
	// RSSFirst/Last and HeapFirst/Last are the medians of the first and
	// last thirds of the samples; RSSMax the largest sample.
	RSSFirst  int64 `json:"rss_first_bytes"`
	RSSLast   int64 `json:"rss_last_bytes"`
	RSSMax    int64 `json:"rss_max_bytes"`
	HeapFirst int64 `json:"heap_first_bytes"`
	HeapLast  int64 `json:"heap_last_bytes"`
	// Baseline and end counts of the daemon's fds and goroutines, the
	// end ones once every object is removed.
	FDsBefore        int      `json:"fds_before"`
	FDsAfter         int      `json:"fds_after"`
	GoroutinesBefore int      `json:"goroutines_before"`
	GoroutinesAfter  int      `json:"goroutines_after"`
	Leftovers        []string `json:"leftovers,omitempty"`
	// NewFDs says what the fds above the baseline point at, when there
	// are more than the slack.
	NewFDs  []string     `json:"new_fds,omitempty"`
	Samples []LoadSample `json:"samples"`
	Checks  []LoadCheck  `json:"checks"`
}

// OK says whether every check held.
func (r LoadResult) OK() bool {
	return len(r.Checks) > 0 && !slices.ContainsFunc(r.Checks, func(c LoadCheck) bool { return !c.Met })
}

// Load operation names, in the order of a client's cycle.
const (
	OpWorkspaceCreate = "ws_create"
	OpWrite           = "file_write"
	OpRead            = "file_read"
	OpSandboxCreate   = "sandbox_create"
	OpExec            = "exec"
	OpDiff            = "diff"
	OpFork            = "fork"
	OpSandboxRemove   = "sandbox_remove"
	OpWorkspaceRemove = "ws_remove"
)

var loadOps = []string{OpWorkspaceCreate, OpWrite, OpRead, OpSandboxCreate, OpExec, OpDiff, OpFork, OpSandboxRemove, OpWorkspaceRemove}

// Load starts a daemon, lets opts.Clients clients run mixed cycles against
// it for opts.Duration, removes everything and checks the daemon for
// errors, memory growth and leaks. Each client's cycle: create a
// workspace, write a file and read it back, create a docker sandbox, run
// four commands (read the file, write one, exit 3, true), read the
// sandbox's file through the API, diff, fork and read the fork, remove
// the sandbox, the fork and the workspace. Every reply is checked. The
// result's checks say what held; a failed check is not an error (the
// caller decides), a failure to run is.
func Load(ctx context.Context, opts LoadOptions, log io.Writer) (res LoadResult, err error) {
	if opts.Clients == 0 {
		opts.Clients = DefaultLoadClients
	}
	if opts.Duration == 0 {
		opts.Duration = DefaultLoadDuration
	}
	if opts.SampleEvery == 0 {
		opts.SampleEvery = time.Second
	}
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Nodes > 1 && opts.Store == "" {
		return res, fmt.Errorf("bench: %d nodes need a shared store (--store postgres://...)", opts.Nodes)
	}
	if opts.Clients < 1 || opts.Duration < 0 {
		return res, fmt.Errorf("bench: clients (%d) and duration (%s) must be positive", opts.Clients, opts.Duration)
	}
	if log == nil {
		log = io.Discard
	}
	d, err := startDaemon(ctx, opts.DaemonOptions, 50, log)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	nodes, err := startNodes(ctx, d, opts.Nodes, log)
	defer func() {
		for _, n := range nodes[1:] {
			err = errors.Join(err, n.close())
		}
	}()
	if err != nil {
		return res, err
	}
	res = LoadResult{Clients: opts.Clients, Duration: opts.Duration, Image: d.opts.Image}
	if opts.Nodes > 1 {
		res.Nodes = opts.Nodes
	}
	rec := &loadRecorder{lat: map[string][]time.Duration{}, errs: map[string]int{}}

	clients := make([]*client.Client, opts.Clients)
	for i := range clients {
		if clients[i], err = client.New("unix://"+nodes[i%len(nodes)].data+"/agentbox.sock", ""); err != nil {
			return res, err
		}
	}
	// A warm-up round, every client one cycle at once, makes what the
	// daemon keeps open once it has seen this much concurrency before the
	// baseline: database connections (SQLite keeps the file of a closed
	// connection open while another one holds a lock on it, and reuses
	// it for the next), idle connections to the engine.
	warm := &loadRecorder{lat: map[string][]time.Duration{}, errs: map[string]int{}}
	parallel(opts.Clients, func(i int) error {
		(&loadClient{d: d, c: clients[i], n: i, rec: warm}).cycle(ctx, -1)
		return nil
	})
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	if warm.nerrs > 0 {
		return res, fmt.Errorf("bench: the warm-up round failed: %s", strings.Join(warm.firstErrs, "; "))
	}
	if res.FDsBefore, res.GoroutinesBefore, err = d.settled(ctx, 0, 0); err != nil {
		return res, err
	}
	fdsBefore := d.fdTargets()
	fmt.Fprintf(log, "baseline: %d fds, %d goroutines; %d clients for %s\n", res.FDsBefore, res.GoroutinesBefore, opts.Clients, opts.Duration)

	start := time.Now()
	end := start.Add(opts.Duration)
	sctx, stopSampling := context.WithCancel(ctx)
	samples := make(chan []LoadSample, 1)
	go func() { samples <- d.sample(sctx, start, opts.SampleEvery, log) }()
	var wg sync.WaitGroup
	for i := range opts.Clients {
		lc := &loadClient{d: d, c: clients[i], n: i, rec: rec}
		wg.Go(func() {
			for k := 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
				lc.cycle(ctx, k)
			}
		})
	}
	wg.Wait()
	stopSampling()
	res.Samples = <-samples
	if err := ctx.Err(); err != nil {
		return res, err
	}
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	res.Cycles = rec.cycles
	res.Errors, res.ErrorCount = rec.firstErrs, rec.nerrs
	for _, op := range loadOps {
		res.Ops = append(res.Ops, rec.op(op))
	}
	fmt.Fprintf(log, "%d cycles, %d errors; checking for leaks\n", res.Cycles, res.ErrorCount)

	// Whatever a failed cycle left is removed first, so that the leak
	// check sees what the daemon itself keeps.
	if err := d.removeAll(ctx, teardownParallel); err != nil {
		return res, err
	}
	if res.Leftovers, err = d.leftovers(ctx); err != nil {
		return res, err
	}
	for _, n := range nodes[1:] {
		left, err := n.localLeftovers()
		if err != nil {
			return res, err
		}
		res.Leftovers = append(res.Leftovers, left...)
	}
	fdSlack, grSlack := res.slack()
	if res.FDsAfter, res.GoroutinesAfter, err = d.settled(ctx, res.FDsBefore+fdSlack, res.GoroutinesBefore+grSlack); err != nil {
		return res, err
	}
	if res.FDsAfter > res.FDsBefore+fdSlack {
		for t, n := range d.fdTargets() {
			if n > fdsBefore[t] {
				res.NewFDs = append(res.NewFDs, fmt.Sprintf("%d more on %s", n-fdsBefore[t], t))
			}
		}
	}
	res.summarize()
	return res, nil
}

// startNodes starts n-1 more daemons beside d on its store, each on a
// data dir of its own, and returns all n, d first. The others use d's
// repo and record the sandboxes they see in d.
func startNodes(ctx context.Context, d *daemonProc, n int, log io.Writer) ([]*daemonProc, error) {
	nodes := []*daemonProc{d}
	for range n - 1 {
		nd, err := startDaemon(ctx, d.opts, -1, log)
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// counts reads the daemon's open fds and goroutines.
func (d *daemonProc) counts(ctx context.Context) (fds, goroutines int, err error) {
	m, err := d.scrape(ctx, metricGoroutines)
	if err != nil {
		return 0, 0, err
	}
	fds, err = d.fds()
	return fds, int(m[metricGoroutines]), err
}

// settled reads the daemon's fd and goroutine counts once they stop
// falling (connections and their goroutines end a moment after the
// clients close them) or are at most fds and goroutines: polled, for at
// most 15 s.
func (d *daemonProc) settled(ctx context.Context, fds, goroutines int) (int, int, error) {
	deadline := time.Now().Add(15 * time.Second)
	lastF, lastG, same := -1, -1, 0
	for {
		f, g, err := d.counts(ctx)
		if err != nil {
			return 0, 0, err
		}
		if f == lastF && g == lastG {
			same++
		} else {
			same = 0
		}
		if (f <= fds && g <= goroutines) || same >= 5 || time.Now().After(deadline) {
			return f, g, nil
		}
		lastF, lastG = f, g
		time.Sleep(200 * time.Millisecond) // polling for connections to close, bounded
	}
}

// sample reads the daemon's memory every interval until ctx ends.
func (d *daemonProc) sample(ctx context.Context, start time.Time, every time.Duration, log io.Writer) []LoadSample {
	var out []LoadSample
	t := time.NewTicker(every)
	defer t.Stop()
	lastLog := start
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		s := LoadSample{At: time.Since(start)}
		s.RSS, _ = d.rss()
		s.FDs, _ = d.fds()
		if m, err := d.scrape(ctx, metricHeapInuse, metricGoroutines); err == nil {
			s.HeapInuse, s.Goroutines = int64(m[metricHeapInuse]), int(m[metricGoroutines])
		}
		if s.RSS == 0 || s.HeapInuse == 0 {
			continue // the daemon is busy or the run is ending
		}
		out = append(out, s)
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			fmt.Fprintf(log, "  %s: rss %s, heap %s, %d goroutines, %d fds\n", s.At.Round(time.Second), fmtMiB(s.RSS), fmtMiB(s.HeapInuse), s.Goroutines, s.FDs)
		}
	}
}

// slack is what the daemon may hold above its baseline once everything
// is removed: FDSlack and GoroutineSlack, and with other nodes, the idle
// forwarding connections kept to and from each (PeerIdleConns).
func (r *LoadResult) slack() (fds, goroutines int) {
	peers := max(r.Nodes-1, 0)
	return FDSlack + peers*2*PeerIdleConns, GoroutineSlack + peers*3*PeerIdleConns
}

func (r *LoadResult) summarize() {
	fdSlack, grSlack := r.slack()
	ss := r.Samples[len(r.Samples)/10:]
	third := len(ss) / 3
	if third > 0 {
		med := func(part []LoadSample, f func(LoadSample) int64) int64 {
			v := make([]int64, len(part))
			for i, s := range part {
				v[i] = f(s)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		rss := func(s LoadSample) int64 { return s.RSS }
		heap := func(s LoadSample) int64 { return s.HeapInuse }
		r.RSSFirst, r.RSSLast = med(ss[:third], rss), med(ss[len(ss)-third:], rss)
		r.HeapFirst, r.HeapLast = med(ss[:third], heap), med(ss[len(ss)-third:], heap)
	}
	for _, s := range r.Samples {
		r.RSSMax = max(r.RSSMax, s.RSS)
	}
	flat := func(first, last int64) bool {
		return third > 0 && float64(last) <= MemoryGrowthRatio*float64(first)+MemoryGrowthSlack
	}
	target := fmt.Sprintf("<= %.2fx first + %s", MemoryGrowthRatio, fmtMiB(MemoryGrowthSlack))
	r.Checks = []LoadCheck{
		{Name: "errors", Value: fmt.Sprint(r.ErrorCount), Target: "0", Met: r.ErrorCount == 0 && r.Cycles > 0},
		{Name: "rss last third vs first", Value: fmtMiB(r.RSSFirst) + " -> " + fmtMiB(r.RSSLast), Target: target, Met: flat(r.RSSFirst, r.RSSLast)},
		{Name: "go heap last third vs first", Value: fmtMiB(r.HeapFirst) + " -> " + fmtMiB(r.HeapLast), Target: target, Met: flat(r.HeapFirst, r.HeapLast)},
		{Name: "objects left (containers, mounts, dirs, rows)", Value: fmt.Sprint(len(r.Leftovers)), Target: "0", Met: len(r.Leftovers) == 0},
		{Name: "fds after vs before", Value: fmt.Sprintf("%d -> %d", r.FDsBefore, r.FDsAfter), Target: fmt.Sprintf("<= before + %d", fdSlack), Met: r.FDsAfter <= r.FDsBefore+fdSlack},
		{Name: "goroutines after vs before", Value: fmt.Sprintf("%d -> %d", r.GoroutinesBefore, r.GoroutinesAfter), Target: fmt.Sprintf("<= before + %d", grSlack), Met: r.GoroutinesAfter <= r.GoroutinesBefore+grSlack},
	}
}

// Print writes the result as tables.
func (r LoadResult) Print(w io.Writer) {
	against := "one daemon"
	if r.Nodes > 1 {
		against = fmt.Sprintf("%d daemons sharing one store, round-robin (daemon figures: the first's)", r.Nodes)
	}
	fmt.Fprintf(w, "agentbox bench load: %d clients for %s against %s (docker, %s); %d cycles\n\n", r.Clients, r.Duration, against, r.Image, r.Cycles)
	fmt.Fprintf(w, "%-15s %7s %6s %10s %10s %10s\n", "op", "count", "errors", "p50", "p99", "max")
	for _, o := range r.Ops {
		fmt.Fprintf(w, "%-15s %7d %6d %10s %10s %10s\n", o.Op, o.Count, o.Errors, fmtDur(o.P50), fmtDur(o.P99), fmtDur(o.Max))
	}
	fmt.Fprintf(w, "\ndaemon rss max %s\n\n", fmtMiB(r.RSSMax))
	cw := len("check")
	for _, c := range r.Checks {
		cw = max(cw, len(c.Name))
	}
	fmt.Fprintf(w, "%-*s %-22s %-24s\n", cw, "check", "value", "target")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-*s %-22s %-24s %s\n", cw, c.Name, c.Value, c.Target, verdict(c.Met))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	for _, l := range r.Leftovers {
		fmt.Fprintf(w, "left: %s\n", l)
	}
	for _, l := range r.NewFDs {
		fmt.Fprintf(w, "fds: %s\n", l)
	}
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// loadRecorder collects every client's latencies and errors.
type loadRecorder struct {
	mu        sync.Mutex
	lat       map[string][]time.Duration
	errs      map[string]int
	nerrs     int
	firstErrs []string
	cycles    int
}

func (r *loadRecorder) add(op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs[op]++
		r.nerrs++
		if len(r.firstErrs) < 20 {
			r.firstErrs = append(r.firstErrs, op+": "+err.Error())
		}
		return
	}
	r.lat[op] = append(r.lat[op], d)
}

func (r *loadRecorder) op(name string) LoadOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := slices.Clone(r.lat[name])
	slices.Sort(ds)
	o := LoadOp{Op: name, Count: len(ds), Errors: r.errs[name]}
	if len(ds) > 0 {
		o.P50, o.P99, o.Max = ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)], ds[len(ds)-1]
	}
	return o
}

// loadClient is one client of the load benchmark.
type loadClient struct {
	d   *daemonProc
	c   *client.Client
	n   int
	rec *loadRecorder
}

// timed runs one operation and records its latency or its error.
func (lc *loadClient) timed(op string, f func() error) bool {
	start := time.Now()
	err := f()
	lc.rec.add(op, time.Since(start), err)
	return err == nil
}

// cycle runs one client cycle (see Load). A failed step records its error
// and ends the cycle after removing what it made.
func (lc *loadClient) cycle(ctx context.Context, k int) {
	c := lc.c
	var ws, fork client.Workspace
	defer func() {
		// What a failed cycle made goes, through the daemon (counted
		// as errors if that fails too).
		for _, id := range []string{fork.ID, ws.ID} {
			if id != "" {
				lc.timed(OpWorkspaceRemove, func() error { return c.RemoveWorkspace(context.WithoutCancel(ctx), id) })
			}
		}
	}()
	name := fmt.Sprintf("load/c%d-%d.txt", lc.n, k)
	content := strings.Repeat(fmt.Sprintf("client %d cycle %d\n", lc.n, k), 20)
	ok := lc.timed(OpWorkspaceCreate, func() (err error) {
		ws, err = c.CreateWorkspace(ctx, client.CreateWorkspace{Repo: lc.d.repo, Task: "load"})
		return err
	}) && lc.timed(OpWrite, func() error {
		_, err := c.WriteFile(ctx, ws.ID, name, strings.NewReader(content), 0, true)
		return err
	}) && lc.timed(OpRead, func() error { return lc.expectFile(ctx, ws.ID, name, content) })
	if !ok {
		return
	}
	var sb client.Sandbox
	if !lc.timed(OpSandboxCreate, func() (err error) {
		sb, err = c.CreateSandbox(ctx, client.CreateSandbox{Workspace: ws.ID, Backend: "docker", Image: lc.d.opts.Image})
		lc.d.saw(sb.ID)
		return err
	}) {
		return
	}
	for _, x := range []struct {
		argv   []string
		code   int
		stdout string
	}{
		{[]string{"cat", name}, 0, content},
		{[]string{"sh", "-c", "echo from sandbox > load/out.txt"}, 0, ""},
		{[]string{"sh", "-c", "exit 3"}, 3, ""},
		{[]string{"true"}, 0, ""},
	} {
		if !lc.timed(OpExec, func() error {
			var out, errb bytes.Buffer
			r, err := c.Exec(ctx, sb.ID, client.Exec{Argv: x.argv, Timeout: "60s"}, &out, &errb)
			lc.d.saw(r.SandboxID)
			switch {
			case err != nil:
				return err
			case r.Replaced || r.SandboxID != sb.ID:
				return fmt.Errorf("%q ran in sandbox %s (replaced %v), not in %s", x.argv, r.SandboxID, r.Replaced, sb.ID)
			case r.ExitCode != x.code || r.Signal != 0 || r.Lost || r.TimedOut:
				return fmt.Errorf("%q in %s: exit %d signal %d lost %v timed out %v, want exit %d; stderr %q", x.argv, sb.ID, r.ExitCode, r.Signal, r.Lost, r.TimedOut, x.code, errb.String())
			case out.String() != x.stdout:
				return fmt.Errorf("%q in %s: stdout %q, want %q", x.argv, sb.ID, out.String(), x.stdout)
			}
			return nil
		}) {
			return
		}
	}
	ok = lc.timed(OpRead, func() error { return lc.expectFile(ctx, ws.ID, "load/out.txt", "from sandbox\n") }) &&
		lc.timed(OpDiff, func() error {
			df, err := c.Diff(ctx, ws.ID)
			if err == nil && (!strings.Contains(df.Diff, name) || !strings.Contains(df.Diff, "+from sandbox")) {
				err = fmt.Errorf("diff of %s lacks %s or load/out.txt:\n%.500s", ws.ID, name, df.Diff)
			}
			return err
		}) &&
		lc.timed(OpFork, func() (err error) {
			fork, err = c.ForkWorkspace(ctx, ws.ID, "", "load")
			return err
		}) &&
		lc.timed(OpRead, func() error { return lc.expectFile(ctx, fork.ID, name, content) }) &&
		lc.timed(OpWrite, func() error {
			_, err := c.WriteFile(ctx, fork.ID, "load/fork.txt", strings.NewReader("fork\n"), 0, true)
			return err
		}) &&
		lc.timed(OpSandboxRemove, func() error { return c.RemoveSandbox(ctx, sb.ID) })
	if !ok {
		return
	}
	for _, p := range []*client.Workspace{&fork, &ws} {
		id := p.ID
		p.ID = ""
		if !lc.timed(OpWorkspaceRemove, func() error { return c.RemoveWorkspace(ctx, id) }) {
			return
		}
	}
	lc.rec.mu.Lock()
	lc.rec.cycles++
	lc.rec.mu.Unlock()
}

// expectFile reads path from workspace id and compares it with want.
func (lc *loadClient) expectFile(ctx context.Context, id, path, want string) error {
	var b bytes.Buffer
	if _, err := lc.c.ReadFile(ctx, id, path, &b); err != nil {
		return err
	}
	if b.String() != want {
		return fmt.Errorf("%s in workspace %s: read %q, want %q", path, id, b.String(), want)
	}
	return nil
}
