package bench

// Where the time of create → first exec goes, seen from the daemon. A
// profiling environment wraps the store and the backends in timers,
// routes the docker backends' engine connection through a timing reverse
// proxy, and reads the local backend's own phase log. The manager is the
// real one, untouched; the time between the timed calls is attributed to
// the manager code that runs there (see gapNames).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// span is one timed call.
type span struct {
	phase string // "create" or "exec"
	name  string
	depth int // 0: called by the manager; 1: inside a depth-0 call; -1: phase start
	start time.Time
	dur   time.Duration
}

// recorder collects spans while on.
type recorder struct {
	mu      sync.Mutex
	on      bool
	phase   string
	spans   []span
	servers []*http.Server
}

func (r *recorder) begin(phase string) {
	r.mu.Lock()
	r.on, r.phase, r.spans = true, phase, nil
	r.mu.Unlock()
}

// setPhase starts the next phase and marks when (a span of depth -1).
func (r *recorder) setPhase(phase string) {
	now := time.Now()
	r.mu.Lock()
	r.phase = phase
	if r.on {
		r.spans = append(r.spans, span{phase: phase, depth: -1, start: now})
	}
	r.mu.Unlock()
}

func (r *recorder) end() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	out := r.spans
	r.spans = nil
	return out
}

func (r *recorder) add(name string, depth int, start time.Time, dur time.Duration) {
	r.mu.Lock()
	if r.on {
		r.spans = append(r.spans, span{phase: r.phase, name: name, depth: depth, start: start, dur: dur})
	}
	r.mu.Unlock()
}

// timed runs f and records it.
func (r *recorder) timed(name string, f func() error) error {
	start := time.Now()
	err := f()
	r.add(name, 0, start, time.Since(start))
	return err
}

func (r *recorder) close() error {
	var errs []error
	for _, s := range r.servers {
		errs = append(errs, s.Close())
	}
	r.servers = nil
	return errors.Join(errs...)
}

// timedStore times the store calls of the sandbox and exec paths. Every
// write is a committed transaction (synchronous=FULL: one fsync each).
type timedStore struct {
	store.Store
	r *recorder
}

func (s *timedStore) GetWorkspace(ctx context.Context, id string) (w store.Workspace, err error) {
	err = s.r.timed("store.GetWorkspace (read)", func() error { w, err = s.Store.GetWorkspace(ctx, id); return err })
	return w, err
}

func (s *timedStore) GetSandbox(ctx context.Context, id string) (sb store.Sandbox, err error) {
	err = s.r.timed("store.GetSandbox (read)", func() error { sb, err = s.Store.GetSandbox(ctx, id); return err })
	return sb, err
}

func (s *timedStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) (sbs []store.Sandbox, err error) {
	err = s.r.timed("store.ListSandboxes (read)", func() error { sbs, err = s.Store.ListSandboxes(ctx, f); return err })
	return sbs, err
}

func (s *timedStore) CreateSandbox(ctx context.Context, sb store.Sandbox) error {
	return s.r.timed("store.CreateSandbox (write)", func() error { return s.Store.CreateSandbox(ctx, sb) })
}

func (s *timedStore) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	return s.r.timed("store.UpdateSandbox (write)", func() error { return s.Store.UpdateSandbox(ctx, sb) })
}

func (s *timedStore) CreateExec(ctx context.Context, e store.Exec) error {
	return s.r.timed("store.CreateExec (write)", func() error { return s.Store.CreateExec(ctx, e) })
}

func (s *timedStore) FinishExec(ctx context.Context, e store.Exec) error {
	return s.r.timed("store.FinishExec (write)", func() error { return s.Store.FinishExec(ctx, e) })
}

// UpdateSandboxEvent is timed as UpdateSandbox: the state change, its
// event in the same commit.
func (s *timedStore) UpdateSandboxEvent(ctx context.Context, sb store.Sandbox, ev store.Event) (out store.Event, err error) {
	err = s.r.timed("store.UpdateSandbox (write)", func() error { out, err = s.Store.UpdateSandboxEvent(ctx, sb, ev); return err })
	return out, err
}

// FinishExecEvent is timed as FinishExec: the exec's end, its event in
// the same commit.
func (s *timedStore) FinishExecEvent(ctx context.Context, e store.Exec, ev store.Event) (out store.Event, err error) {
	err = s.r.timed("store.FinishExec (write)", func() error { out, err = s.Store.FinishExecEvent(ctx, e, ev); return err })
	return out, err
}

func (s *timedStore) AppendEvent(ctx context.Context, e store.Event) (ev store.Event, err error) {
	err = s.r.timed("store.AppendEvent (write)", func() error { ev, err = s.Store.AppendEvent(ctx, e); return err })
	return ev, err
}

// timedBackend times Create.
type timedBackend struct {
	sandbox.Backend
	r *recorder
}

func (b *timedBackend) Create(ctx context.Context, req sandbox.CreateRequest) (info sandbox.Info, err error) {
	err = b.r.timed("backend.Create", func() error { info, err = b.Backend.Create(ctx, req); return err })
	return info, err
}

// dockerProxy serves a reverse proxy of the engine on a unix socket under
// dir and returns its address: each engine call is recorded.
func (r *recorder) dockerProxy(dir, host string) (string, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	upstream, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return "", fmt.Errorf("profiling needs the engine on a unix socket, not %s", host)
	}
	sock := filepath.Join(dir, fmt.Sprintf("docker-proxy-%d.sock", len(r.servers)))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", err
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", upstream)
		}},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		proxy.ServeHTTP(w, req)
		r.add("docker API "+req.Method+" "+enginePath(req.URL.Path), 1, start, time.Since(start))
	}), ReadHeaderTimeout: 10 * time.Second}
	r.servers = append(r.servers, srv)
	go srv.Serve(ln)
	return "unix://" + sock, nil
}

var (
	apiVersion  = regexp.MustCompile(`^/v[0-9.]+/`)
	containerID = regexp.MustCompile(`^/containers/[^/]+/`)
)

// enginePath drops the API version and the container from an engine path.
func enginePath(p string) string {
	p = apiVersion.ReplaceAllString(p, "/")
	if !strings.HasPrefix(p, "/containers/create") && !strings.HasPrefix(p, "/containers/json") {
		p = containerID.ReplaceAllString(p, "/containers/{id}/")
	}
	return p
}

// localPhases are the steps the local backend logs with "sandbox started".
var localPhases = []string{"state", "cgroups", "stage", "namespaces", "record", "jail", "unstage"}

// logHandler reads the local backend's phase timings from its log.
func (r *recorder) logHandler() slog.Handler { return &phaseHandler{r: r} }

type phaseHandler struct {
	r     *recorder
	attrs []slog.Attr
}

func (h *phaseHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *phaseHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &phaseHandler{r: h.r, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *phaseHandler) WithGroup(string) slog.Handler { return h }

func (h *phaseHandler) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message != "sandbox started" {
		return nil
	}
	ds := map[string]time.Duration{}
	rec.Attrs(func(a slog.Attr) bool {
		if d, err := time.ParseDuration(a.Value.String()); err == nil && slices.Contains(localPhases, a.Key) {
			ds[a.Key] = d
		}
		return true
	})
	// The log line is written when the last phase ends: lay the phases
	// out backwards from it.
	end := rec.Time
	for i := len(localPhases) - 1; i >= 0; i-- {
		d, ok := ds[localPhases[i]]
		if !ok {
			continue
		}
		end = end.Add(-d)
		h.r.add("local: "+localPhases[i], 1, end, d)
	}
	return nil
}

// gapNames say which manager code runs between two timed calls of a
// phase (see internal/manager/sandbox.go: CreateSandbox, startSandbox,
// Exec, ensureSandbox).
var gapNames = map[[3]string]string{
	{"create", "store.GetWorkspace (read)", "store.ListSandboxes (read)"}:   "manager: workspace attach check (mountinfo), spec, lock",
	{"create", "store.ListSandboxes (read)", "store.CreateSandbox (write)"}: "manager: live check, token, spec JSON",
	{"create", "store.CreateSandbox (write)", "backend.Create"}:             "manager: run dir, chown, guest socket listen",
	{"create", "backend.Create", "store.UpdateSandbox (write)"}:             "guest start and connect (wait in Accept)",
	{"exec", "store.GetSandbox (read)", "store.GetWorkspace (read)"}:        "manager: resolve the target",
	{"exec", "store.GetWorkspace (read)", "store.ListSandboxes (read)"}:     "manager: workspace attach check (mountinfo), lock",
	{"exec", "store.ListSandboxes (read)", "store.CreateExec (write)"}:      "manager: live check, exec record",
	{"exec", "store.CreateExec (write)", "store.FinishExec (write)"}:        "guest round trip: exec `true`",
	{"exec", "store.FinishExec (write)", "store.UpdateSandbox (write)"}:     "manager: between the two writes",
}

// gapName names the untimed stretch between two calls of a phase.
func gapName(phase, prev, next string) string {
	if n, ok := gapNames[[3]string{phase, prev, next}]; ok {
		return phase + ": " + n
	}
	switch {
	case prev == "start":
		return phase + ": manager: entry"
	case next == "end":
		return phase + ": manager: return"
	}
	return fmt.Sprintf("%s: manager: between %s and %s", phase, prev, next)
}

// Step is one line of a breakdown.
type Step struct {
	Name string `json:"name"`
	// Depth 1 steps run inside the depth 0 step above them and are not
	// counted again in the total.
	Depth  int           `json:"depth"`
	Median time.Duration `json:"median_ns"`
	P90    time.Duration `json:"p90_ns"`
	// Share is the step's median over the total's median.
	Share float64 `json:"share"`
}

// Profile is the create → first exec breakdown of one backend.
type Profile struct {
	Backend string        `json:"backend"`
	Runs    int           `json:"runs"`
	Median  time.Duration `json:"median_ns"`
	P90     time.Duration `json:"p90_ns"`
	Steps   []Step        `json:"steps"`
	// Warm is the breakdown of a second exec of `true` in the same
	// sandbox, right after the first: the exec round trip.
	Warm Breakdown `json:"warm_exec"`
}

// Breakdown is a total and its steps.
type Breakdown struct {
	Median time.Duration `json:"median_ns"`
	P90    time.Duration `json:"p90_ns"`
	Steps  []Step        `json:"steps"`
}

// tally accumulates the steps of several runs.
type tally struct {
	order  []string
	vals   map[string][]time.Duration
	depth  map[string]int
	totals []time.Duration
}

func (t *tally) add(st steps, depths map[string]int, total time.Duration) {
	if t.vals == nil {
		t.vals, t.depth = map[string][]time.Duration{}, map[string]int{}
	}
	t.totals = append(t.totals, total)
	for _, name := range st.order {
		if _, ok := t.vals[name]; !ok {
			t.order = append(t.order, name)
			t.depth[name] = depths[name]
			// A step missing from earlier runs took nothing there.
			t.vals[name] = make([]time.Duration, len(t.totals)-1)
		}
	}
	for _, name := range t.order {
		t.vals[name] = append(t.vals[name], st.d[name])
	}
}

func (t *tally) summary() Breakdown {
	total := summarize("total", t.totals)
	b := Breakdown{Median: total.Median, P90: total.P90}
	for _, name := range t.order {
		c := summarize(name, t.vals[name])
		share := 0.0
		if total.Median > 0 {
			share = float64(c.Median) / float64(total.Median)
		}
		b.Steps = append(b.Steps, Step{Name: name, Depth: t.depth[name], Median: c.Median, P90: c.P90, Share: share})
	}
	return b
}

// profileCreate runs create → first exec runs times per backend with the
// recorder on, after one untimed warm-up.
func (e *env) profileCreate(ctx context.Context, runs int) ([]Profile, error) {
	var out []Profile
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return nil, err
		}
		var first, warm tally
		start := -1 // an untimed warm-up run
		if e.noWarmup {
			start = 0
		}
		for i := start; i < runs; i++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if i >= 0 {
				e.prof.begin("create")
			}
			t0 := time.Now()
			sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b})
			if err == nil {
				e.prof.setPhase("exec")
				err = e.execTrue(ctx, sb.ID)
			}
			t1 := time.Now()
			spans := e.prof.end()
			var wspans []span
			if err == nil {
				e.prof.begin("exec")
				err = e.execTrue(ctx, sb.ID)
				wspans = e.prof.end()
			}
			t2 := time.Now()
			if sb.ID != "" {
				err = errors.Join(err, e.m.RemoveSandbox(context.WithoutCancel(ctx), sb.ID))
			}
			if err != nil {
				return nil, fmt.Errorf("bench: profiling %s: %w", b, err)
			}
			quiesce()
			if i < 0 {
				continue
			}
			st, depths := breakdown(spans, t0, t1)
			first.add(st, depths, t1.Sub(t0))
			wst, wdepths := breakdown(wspans, t1, t2)
			warm.add(wst, wdepths, t2.Sub(t1))
		}
		fb := first.summary()
		p := Profile{Backend: b, Runs: runs, Median: fb.Median, P90: fb.P90, Steps: fb.Steps, Warm: warm.summary()}
		out = append(out, p)
		e.logf("profiled %s: %d runs, median %s", b, runs, fmtDur(p.Median))
	}
	return out, nil
}

// steps are the summed durations of one run by step name, in order.
type steps struct {
	order []string
	d     map[string]time.Duration
}

func (s *steps) add(name string, d time.Duration) {
	if s.d == nil {
		s.d = map[string]time.Duration{}
	}
	if _, ok := s.d[name]; !ok {
		s.order = append(s.order, name)
	}
	s.d[name] += d
}

// breakdown turns one run's spans into steps: the depth 0 calls, the
// untimed stretches between them (named by gapName), and the depth 1
// calls under the depth 0 one they fall in. The depth 0 steps and the
// gaps add up to t1-t0.
func breakdown(spans []span, t0, t1 time.Time) (steps, map[string]int) {
	var top, sub []span
	for _, s := range spans {
		if s.depth <= 0 {
			top = append(top, s)
		} else {
			sub = append(sub, s)
		}
	}
	slices.SortFunc(top, func(a, b span) int { return a.start.Compare(b.start) })
	slices.SortFunc(sub, func(a, b span) int { return a.start.Compare(b.start) })
	var st steps
	depths := map[string]int{}
	cursor, prev, phase := t0, "start", ""
	if len(spans) > 0 {
		phase = spans[0].phase
	}
	for _, s := range top {
		if s.depth < 0 {
			if gap := s.start.Sub(cursor); gap > 0 {
				st.add(gapName(phase, prev, "end"), gap)
			}
			cursor, prev, phase = s.start, "start", s.phase
			continue
		}
		if gap := s.start.Sub(cursor); gap > 0 {
			st.add(gapName(phase, prev, s.name), gap)
		}
		name := phase + ": " + s.name
		st.add(name, s.dur)
		// The calls made inside this one, e.g. the engine calls of a
		// backend's Create.
		end := s.start.Add(s.dur)
		for _, c := range sub {
			if !c.start.Before(s.start) && !c.start.After(end) {
				n := "  " + c.name
				st.add(n, c.dur)
				depths[n] = 1
			}
		}
		cursor, prev = end, s.name
	}
	if gap := t1.Sub(cursor); gap > 0 {
		st.add(gapName(phase, prev, "end"), gap)
	}
	return st, depths
}

// Print writes the breakdowns as tables.
func (p Profile) Print(w io.Writer) {
	fmt.Fprintf(w, "create → first exec on %s, where the time goes (%d instrumented runs, median %s, p90 %s)\n", p.Backend, p.Runs, fmtDur(p.Median), fmtDur(p.P90))
	printSteps(w, p.Steps)
	fmt.Fprintf(w, "\nthe next exec in the same sandbox on %s (median %s, p90 %s)\n", p.Backend, fmtDur(p.Warm.Median), fmtDur(p.Warm.P90))
	printSteps(w, p.Warm.Steps)
}

func printSteps(w io.Writer, steps []Step) {
	width := len("step")
	for _, s := range steps {
		width = max(width, len(s.Name))
	}
	fmt.Fprintf(w, "%-*s %11s %11s %6s\n", width, "step", "median", "p90", "share")
	for _, s := range steps {
		share := ""
		if s.Depth == 0 {
			share = fmt.Sprintf("%5.1f%%", 100*s.Share)
		}
		fmt.Fprintf(w, "%-*s %11s %11s %6s\n", width, s.Name, fmtDur(s.Median), fmtDur(s.P90), share)
	}
}
