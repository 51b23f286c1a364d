// Package telemetry holds the daemon's Prometheus metrics. Metrics owns its
// own registry, never the process-wide default, so that two daemons in one
// process (tests) never collide and nothing registered by a library leaks
// into /metrics.
//
// The manager does not import this package (the Prometheus client depends
// on net/http); *Metrics satisfies manager.Observer and the daemon hands it
// over.
package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Exec outcomes, the values of agentbox_execs_total's outcome label. They
// are manager.Outcome*; repeated here so that every series exists at zero
// from the start (a rate over a series that appears late is wrong).
var outcomes = []string{"ok", "nonzero", "timeout", "oom", "killed", "lost"}

// SandboxKey is a (state, backend) pair, the labels of agentbox_sandboxes.
type SandboxKey = [2]string

// CountSandboxes counts sandboxes by state and backend. It is called at
// every scrape, so it should be one cheap query.
type CountSandboxes func(ctx context.Context) (map[SandboxKey]int, error)

// Options configures Metrics.
type Options struct {
	// Sandboxes, if set, feeds agentbox_sandboxes at scrape time.
	Sandboxes CountSandboxes
	// Backends are the backend names whose series exist from the start.
	Backends []string
	// ScrapeTimeout bounds one Sandboxes call (default 5s).
	ScrapeTimeout time.Duration
	// RepairKinds are the reconciler's repair kinds whose series exist
	// from the start (manager.RepairKinds).
	RepairKinds []string
}

// Metrics is the daemon's metrics. Its methods are safe for concurrent use.
type Metrics struct {
	reg            *prometheus.Registry
	createSeconds  *prometheus.HistogramVec
	createErrors   *prometheus.CounterVec
	execSeconds    *prometheus.HistogramVec
	execs          *prometheus.CounterVec
	egressDecision *prometheus.CounterVec
	gcRemovals     *prometheus.CounterVec
	repairs        *prometheus.CounterVec
	poolReady      *prometheus.GaugeVec
	poolClaims     *prometheus.CounterVec
	solveFailures  *prometheus.CounterVec
	resolveAllow   *prometheus.CounterVec
	dependencies   *prometheus.CounterVec
}

// gcKinds are what the collector removes (manager.GCKinds), the values of
// agentbox_gc_removals_total's kind label.
var gcKinds = []string{"image", "sandbox", "pristine", "repo", "workspace"}

// latencyBuckets span a fast exec (milliseconds) to a slow image pull or a
// long build (minutes).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// New returns Metrics with a fresh registry holding the agentbox metrics
// and the Go and process collectors.
func New(opts Options) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentbox_sandbox_create_seconds",
			Help:    "Wall time of successful sandbox creations.",
			Buckets: latencyBuckets,
		}, []string{"backend"}),
		createErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_sandbox_create_errors_total",
			Help: "Sandbox creations that failed.",
		}, []string{"backend"}),
		execSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agentbox_exec_seconds",
			Help:    "Wall time of commands run in sandboxes.",
			Buckets: latencyBuckets,
		}, []string{"backend"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_execs_total",
			Help: "Commands run in sandboxes, by how they ended.",
		}, []string{"backend", "outcome"}),
		egressDecision: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_egress_decisions_total",
			Help: "Egress proxy decisions on sandbox connections.",
		}, []string{"allowed"}),
		gcRemovals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_gc_removals_total",
			Help: "Objects the disk collector removed, by kind.",
		}, []string{"kind"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_reconciler_repairs_total",
			Help: "Repairs made by the reconciler, by kind.",
		}, []string{"kind"}),
		poolReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agentbox_warm_pool_ready",
			Help: "Pre-started environments waiting in a warm pool, by backend and image.",
		}, []string{"backend", "image"}),
		poolClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_warm_pool_claims_total",
			Help: "Sandbox creations of a class that has a warm pool, by result: hit (a pooled environment) or miss (the pool was empty: cold start). Hit rate: rate(result=\"hit\") / rate(all).",
		}, []string{"backend", "image", "result"}),
		solveFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_solve_failures_total",
			Help: "Failed test executions of the agent loop (agentbox solve), by category: syntax, import, assertion, timeout, oom, egress_denied, compile, other.",
		}, []string{"category"}),
		resolveAllow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_egress_resolve_allowance_uses_total",
			Help: "Times an operator's resolve allowance (egress.resolve_allow) let a host's internal address pass the egress checks, by host.",
		}, []string{"host"}),
		dependencies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentbox_dependency_requests_total",
			Help: "Dependency admission requests, by result: admitted or denied.",
		}, []string{"result"}),
	}
	m.dependencies.WithLabelValues("admitted")
	m.dependencies.WithLabelValues("denied")
	for _, c := range SolveCategories {
		m.solveFailures.WithLabelValues(c)
	}
	for _, k := range gcKinds {
		m.gcRemovals.WithLabelValues(k)
	}
	for _, k := range opts.RepairKinds {
		m.repairs.WithLabelValues(k)
	}
	for _, b := range opts.Backends {
		m.createSeconds.WithLabelValues(b)
		m.createErrors.WithLabelValues(b)
		m.execSeconds.WithLabelValues(b)
		for _, o := range outcomes {
			m.execs.WithLabelValues(b, o)
		}
	}
	m.egressDecision.WithLabelValues("true")
	m.egressDecision.WithLabelValues("false")
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.createSeconds, m.createErrors, m.execSeconds, m.execs, m.egressDecision, m.gcRemovals, m.repairs,
		m.poolReady, m.poolClaims, m.solveFailures, m.resolveAllow, m.dependencies,
	)
	if opts.Sandboxes != nil {
		timeout := opts.ScrapeTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		m.reg.MustRegister(&sandboxCollector{count: opts.Sandboxes, timeout: timeout})
	}
	return m
}

// Registry is the registry behind Handler, for tests and for registering
// more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveCreate records one sandbox creation; a failed one counts as an
// error and stays out of the latency histogram, where a quick refusal
// would read as a fast start.
func (m *Metrics) ObserveCreate(backend string, d time.Duration, err error) {
	if err != nil {
		m.createErrors.WithLabelValues(backend).Inc()
		return
	}
	m.createSeconds.WithLabelValues(backend).Observe(d.Seconds())
}

// ObserveExec records one command's wall time and how it ended (ok,
// nonzero, timeout, oom, killed or lost).
func (m *Metrics) ObserveExec(backend string, d time.Duration, outcome string) {
	m.execSeconds.WithLabelValues(backend).Observe(d.Seconds())
	m.execs.WithLabelValues(backend, outcome).Inc()
}

// ObserveEgress records one egress proxy decision.
func (m *Metrics) ObserveEgress(allowed bool) {
	m.egressDecision.WithLabelValues(strconv.FormatBool(allowed)).Inc()
}

// ObserveGCRemoval records one removal by the disk collector (it makes
// *Metrics a manager.GCObserver).
func (m *Metrics) ObserveGCRemoval(kind string) {
	m.gcRemovals.WithLabelValues(kind).Inc()
}

// ObserveRepair counts one reconciler repair of the given kind.
func (m *Metrics) ObserveRepair(kind string) {
	m.repairs.WithLabelValues(kind).Inc()
}

// Handler serves the registry in the Prometheus exposition format. A
// failing collector (the store busy at scrape time) drops its own series
// and the rest is still served: the process and exec metrics matter most
// exactly when the daemon is in trouble.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

var sandboxesDesc = prometheus.NewDesc("agentbox_sandboxes",
	"Sandboxes known to the daemon, by state and backend.", []string{"state", "backend"}, nil)

// sandboxCollector asks the store at scrape time, so the gauge is never
// out of step with the rows (a crash, a reconcile, a restart).
type sandboxCollector struct {
	count   CountSandboxes
	timeout time.Duration
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
		return
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// ObservePoolSize sets the number of ready environments in the warm pool
// of backend and image (manager.PoolObserver). The pool's claim series
// exist from then on, at zero, so that its hit rate is defined from the
// start.
func (m *Metrics) ObservePoolSize(backend, image string, ready int) {
	m.poolReady.WithLabelValues(backend, image).Set(float64(ready))
	m.poolClaims.WithLabelValues(backend, image, "hit")
	m.poolClaims.WithLabelValues(backend, image, "miss")
}

// ObservePoolClaim counts one sandbox creation of a class with a warm
// pool: a hit, or a miss that started cold (manager.PoolObserver).
func (m *Metrics) ObservePoolClaim(backend, image string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.poolClaims.WithLabelValues(backend, image, result).Inc()
}

// SolveCategories are the agent loop's failure categories (solve.Categories,
// listed here so that telemetry imports nothing of the loop).
var SolveCategories = []string{"syntax", "import", "assertion", "timeout", "oom", "egress_denied", "compile", "other"}

// ObserveSolveFailure counts one failed execution of the agent loop.
func (m *Metrics) ObserveSolveFailure(category string) {
	m.solveFailures.WithLabelValues(category).Inc()
}

// ObserveResolveAllowance counts one use of an operator's resolve
// allowance for host.
func (m *Metrics) ObserveResolveAllowance(host string) {
	m.resolveAllow.WithLabelValues(host).Inc()
}

// ObserveDependency counts one dependency admission request.
func (m *Metrics) ObserveDependency(admitted bool) {
	r := "denied"
	if admitted {
		r = "admitted"
	}
	m.dependencies.WithLabelValues(r).Inc()
}
