package bench

// The egress benchmark: what the egress path (client in the sandbox →
// guest proxy on 127.0.0.1:3128 → egress socket → the daemon's proxy →
// upstream) costs against the same client on the host going straight to
// the same upstream. Both sides run egress_client.py, which times its own
// requests, so process start counts on neither side.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Egress cases. The "via proxy" ones run in a sandbox of their row's
// backend, the "direct" ones on the host.
const (
	CaseDownloadProxy  = "python GET /big via egress proxy"
	CaseDownloadDirect = "python GET /big direct"
	CaseHTTPProxy      = "python N x (new conn, GET /small) via proxy"
	CaseHTTPDirect     = "python N x (new conn, GET /small) direct"
	CaseConnectProxy   = "python N x (CONNECT, TLS, GET /small) via proxy"
	CaseConnectDirect  = "python N x (new conn, TLS, GET /small) direct"
)

// Egress defaults and targets.
const (
	// DefaultEgressImage has python3, which the client needs.
	DefaultEgressImage = "agentbox/debian:bookworm"
	// DefaultEgressRuns is low: each run moves the download once per
	// backend and once on the host.
	DefaultEgressRuns     = 3
	DefaultEgressBytes    = 100_000_000
	DefaultEgressRequests = 1000
	// TargetEgressThroughput is the least share of the direct download's
	// throughput the proxy path should keep.
	TargetEgressThroughput = 0.5
	// TargetConnectAdded bounds what a new CONNECT (+ TLS + GET) through
	// the proxy adds over the same request made directly.
	TargetConnectAdded = 2 * time.Millisecond
)

// UpstreamHost is the name under which sandboxes reach the egress
// benchmark's upstreams: the bench's egress proxy resolves it, and no
// other name, to upstreamAddr, the one address it lets through.
const UpstreamHost = "upstream.test"

var upstreamAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// upstreamResolver is the bench's egress proxy's resolver.
type upstreamResolver struct{}

func (upstreamResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if host == UpstreamHost {
		return []netip.Addr{upstreamAddr}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

//go:embed egress_client.py
var egressClient []byte

// egressClientName is the client's file name, in the scratch dir and in
// each workspace.
const egressClientName = ".agentbox-bench-egress.py"

// sandboxPath is the PATH of the commands the benchmark runs in a sandbox.
const sandboxPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// Egress measures, per backend, a download of opts.EgressBytes and
// opts.EgressRequests sequential small requests each on a new connection
// (plain HTTP, and HTTPS through CONNECT), made by a python3 client in a
// sandbox whose policy allows the upstreams, through the egress proxy,
// against the same client on the host going straight to the upstreams on
// 127.0.0.1. The upstreams are started here, on 127.0.0.1 only, and
// sandboxes reach them as UpstreamHost. Everything made is removed before
// it returns.
func Egress(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultEgressRuns)
	// The sandboxes run the egress image: the env builds that one.
	opts.Image = opts.EgressImage
	if err := opts.validate(); err != nil {
		return res, err
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.egressBench(ctx)
}

func (e *env) egressBench(ctx context.Context) (SandboxResult, error) {
	up, err := startUpstream(e.opts.EgressBytes)
	if err != nil {
		return SandboxResult{}, err
	}
	defer up.close()
	return e.egressWith(ctx, up)
}

// egressWith runs the egress benchmark against up.
func (e *env) egressWith(ctx context.Context, up *upstream) (SandboxResult, error) {
	img, size, n := e.opts.EgressImage, e.opts.EgressBytes, e.opts.EgressRequests
	res := SandboxResult{Benchmark: "egress", Image: img, Backends: e.backends, Runs: e.opts.Runs}
	if img != e.opts.Image {
		if _, err := e.ensureImage(ctx, img); err != nil {
			return res, err
		}
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		return res, errors.New("bench: egress: the direct baseline needs python3 on the host")
	}
	hostScript := filepath.Join(e.root, egressClientName)
	if err := os.WriteFile(hostScript, egressClient, 0o644); err != nil {
		return res, err
	}
	pol, err := policy.Parse(fmt.Appendf(nil, "network:\n  mode: allowlist\n  allow: [%q, %q]\n",
		net.JoinHostPort(UpstreamHost, up.port), net.JoinHostPort(UpstreamHost, up.tlsPort)))
	if err != nil {
		return res, fmt.Errorf("bench: egress policy: %w", err)
	}

	// The three requests of each side: which upstream, what is expected.
	via := func(port string) string { return net.JoinHostPort(UpstreamHost, port) }
	direct := func(port string) string { return net.JoinHostPort(upstreamAddr.String(), port) }
	type kind struct {
		proxyCase, directCase string
		mode, port, path      string
		n                     int
		expect                int64
	}
	kinds := []kind{
		{CaseDownloadProxy, CaseDownloadDirect, "download", up.port, "/big", 1, size},
		{CaseHTTPProxy, CaseHTTPDirect, "http", up.port, "/small", n, int64(len(smallBody))},
		{CaseConnectProxy, CaseConnectDirect, "https", up.tlsPort, "/small", n, int64(len(smallBody))},
	}
	tc := func(backend, name string, k kind, c egressCall) tcase {
		t := tcase{backend: backend, name: name, baseline: backend == BackendHost, timed: c.run}
		if k.mode == "download" {
			t.bytes = k.expect
		} else {
			t.ops = k.n
		}
		return t
	}

	var cases []tcase
	var sbs []string
	// Nothing of this benchmark runs on into the next one (bench all).
	defer func() {
		for _, id := range sbs {
			e.m.RemoveSandbox(context.WithoutCancel(ctx), id)
		}
	}()
	versions := map[string]string{} // backend -> python version
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return res, err
		}
		if err := os.WriteFile(filepath.Join(e.m.FilesPath(w), egressClientName), egressClient, 0o644); err != nil {
			return res, fmt.Errorf("bench: copying the egress client into workspace %s: %w", w.ID, err)
		}
		sb, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b, Image: img, Policy: &pol})
		if err != nil {
			return res, fmt.Errorf("bench: %s sandbox with an allowlist: %w", b, err)
		}
		sbs = append(sbs, sb.ID)
		inSandbox := func(ctx context.Context, args []string) ([]byte, error) {
			return e.execOut(ctx, sb.ID, append([]string{"python3", "-I", sandbox.WorkspaceDir + "/" + egressClientName}, args...))
		}
		for _, k := range kinds {
			cases = append(cases, tc(b, k.proxyCase, k, egressCall{
				exec: inSandbox, up: up, versions: versions, label: b,
				mode: k.mode, target: via(k.port), proxy: guest.DefaultProxyAddr, path: k.path, n: k.n, expect: k.expect,
			}))
		}
	}
	onHost := func(ctx context.Context, args []string) ([]byte, error) {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, python, append([]string{"-I", hostScript}, args...)...)
		cmd.Env = withoutProxy(os.Environ())
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %v: %s", python, err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	for _, k := range kinds {
		cases = append(cases, tc(BackendHost, k.directCase, k, egressCall{
			exec: onHost, up: up, versions: versions, label: BackendHost,
			mode: k.mode, target: direct(k.port), path: k.path, n: k.n, expect: k.expect,
		}))
	}

	e.logf("egress: %d MB download, %d small requests per case; warm-up, then %d interleaved runs of %d cases",
		size/1e6, n, e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 1, e.opts.Runs, nil)
	if err != nil {
		return res, err
	}
	res.Rows = rows
	dl, _ := row(rows, BackendHost, CaseDownloadDirect)
	hp, _ := row(rows, BackendHost, CaseHTTPDirect)
	cn, _ := row(rows, BackendHost, CaseConnectDirect)
	for _, b := range e.backends {
		pdl, _ := row(rows, b, CaseDownloadProxy)
		php, _ := row(rows, b, CaseHTTPProxy)
		pcn, _ := row(rows, b, CaseConnectProxy)
		res.Checks = append(res.Checks,
			// direct time / proxy time is proxy throughput / direct.
			ratioCheck(b+": download throughput, proxy / direct", dl, pdl, 0, TargetEgressThroughput),
			addedCheck(b+": added per new-connection HTTP request", php, hp, n, 0),
			addedCheck(b+": added per new CONNECT (+ TLS, GET)", pcn, cn, n, TargetConnectAdded))
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("every row runs the same python3 script (internal/bench/egress_client.py) and is the time it reports for its own requests, without its start; python3 versions: %s", describeVersions(versions, e.backends)),
		fmt.Sprintf("via proxy: in a sandbox of the row's backend (image %s, default limits: %g CPU, policy allowlist %s), http.client to the guest's proxy on %s, which hands the connection over the egress socket to the daemon's egress proxy (the client's socket itself on docker and local, a relay of its bytes on gVisor); decisions go to the event log as the daemon does, committed in batches", img, sandbox.DefaultLimits.CPUs, strings.Join(pol.Network.Allow, " "), guest.DefaultProxyAddr),
		fmt.Sprintf("direct: on the host, the same script to 127.0.0.1, no proxy; the upstreams are Go servers on 127.0.0.1 (plain HTTP :%s, TLS :%s with a self-signed ECDSA P-256 certificate, not verified), reached from sandboxes as %s, which only the bench's resolver knows", up.port, up.tlsPort, UpstreamHost),
		fmt.Sprintf("GET /big: one request, %d bytes (%.0f MB) streamed by the upstream, read in 1 MiB chunks and discarded; rate = throughput at the median", size, float64(size)/1e6),
		fmt.Sprintf("N = %d sequential GETs of /small (%d bytes), each on a new connection: for HTTP via proxy a new connection to the guest's proxy and from the daemon to the upstream; for TLS via proxy a new CONNECT tunnel and TLS handshake through it; added per request = (median via proxy - median direct) / N", n, len(smallBody)),
		"every run checks that the upstream received exactly the requests it made, under Host "+UpstreamHost+":PORT through the proxy and 127.0.0.1:PORT directly")
	return res, nil
}

// addedCheck is what each of n operations of num added over den's, at
// the medians, against "<= bound" (no target when bound is 0).
func addedCheck(name string, num, den Row, n int, bound time.Duration) Check {
	c := Check{Name: name, Value: (num.Median - den.Median) / time.Duration(n)}
	if bound > 0 {
		c.Target, c.Met = "<= "+fmtDur(bound), c.Value <= bound
	}
	return c
}

func describeVersions(versions map[string]string, backends []string) string {
	var parts []string
	for _, b := range append(slices.Clone(backends), BackendHost) {
		if v, ok := versions[b]; ok {
			parts = append(parts, b+" "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// withoutProxy drops the proxy variables from an environment: the direct
// baseline must not go through a proxy the host may have set.
func withoutProxy(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return strings.HasSuffix(strings.ToLower(k), "_proxy")
	})
}

// execOut runs argv in a sandbox and returns its stdout; a failure or a
// non-zero exit is an error with the end of its stderr.
func (e *env) execOut(ctx context.Context, sandboxID string, argv []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	r, err := e.m.Exec(ctx, sandboxID, guest.ExecRequest{Argv: argv, Env: []string{sandboxPath, "HOME=/tmp"}, Timeout: 10 * time.Minute}, nil, &stdout, &stderr)
	if err != nil {
		return nil, err
	}
	if r.ExitCode != 0 || r.Signal != 0 || r.Lost || r.Replaced {
		return nil, fmt.Errorf("%s: exit %d, signal %d, lost %v, replaced %v: %s", argv[0], r.ExitCode, r.Signal, r.Lost, r.Replaced, lastBytes(stderr.String(), 2000))
	}
	return stdout.Bytes(), nil
}

func lastBytes(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// egressCall is one run of the client: where it runs and what it asks.
type egressCall struct {
	exec     func(ctx context.Context, args []string) ([]byte, error)
	up       *upstream
	versions map[string]string // written by run, which measure calls one at a time
	label    string            // backend, for versions
	mode     string            // download, http, https
	target   string            // HOST:PORT, also the Host header
	proxy    string            // HOST:PORT of the proxy, or "" for direct
	path     string
	n        int
	expect   int64 // body bytes per request
}

// clientReport is what the client prints.
type clientReport struct {
	ElapsedNs int64  `json:"elapsed_ns"`
	Requests  int    `json:"requests"`
	Bytes     int64  `json:"bytes"`
	Python    string `json:"python"`
}

// run runs the client once and returns the time it reports. It checks
// that the upstream received exactly the client's requests, under the
// Host the client named: through the proxy, UpstreamHost.
func (c egressCall) run(ctx context.Context) (time.Duration, error) {
	scheme := "http"
	if c.mode == "https" {
		scheme = "https"
	}
	key := scheme + "://" + c.target + c.path
	before := c.up.count(key)
	args := []string{c.mode, "--target", c.target, "--path", c.path, "-n", strconv.Itoa(c.n), "--expect", strconv.FormatInt(c.expect, 10)}
	if c.proxy != "" {
		args = append(args, "--proxy", c.proxy)
	}
	out, err := c.exec(ctx, args)
	if err != nil {
		return 0, err
	}
	var rep clientReport
	if err := json.Unmarshal(bytes.TrimSpace(out), &rep); err != nil {
		return 0, fmt.Errorf("egress client printed %q: %w", lastBytes(string(out), 500), err)
	}
	if rep.Requests != c.n || rep.Bytes != int64(c.n)*c.expect || rep.ElapsedNs <= 0 {
		return 0, fmt.Errorf("egress client: %+v, want %d requests of %d bytes", rep, c.n, c.expect)
	}
	if got := c.up.count(key) - before; got != c.n {
		return 0, fmt.Errorf("the upstream received %d requests %s, want %d", got, key, c.n)
	}
	c.versions[c.label] = rep.Python
	return time.Duration(rep.ElapsedNs), nil
}

// smallBody is what /small answers.
const smallBody = "ok\n"

// upstream is the egress benchmark's pair of servers on 127.0.0.1: plain
// HTTP and TLS, the same handler. /big streams size bytes from one 1 MiB
// block; /small answers smallBody. Every request is counted by scheme,
// Host header and path.
type upstream struct {
	plain, tls    *http.Server
	port, tlsPort string
	size          int64
	block         []byte
	mu            sync.Mutex
	seen          map[string]int // "scheme://host/path" -> requests
}

func startUpstream(size int64) (_ *upstream, err error) {
	u := &upstream{size: size, block: make([]byte, 1<<20), seen: map[string]int{}}
	rand.Read(u.block)
	cert, err := selfSigned()
	if err != nil {
		return nil, fmt.Errorf("bench: upstream certificate: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: upstream: %w", err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("bench: upstream: %w", err)
	}
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	_, u.tlsPort, _ = net.SplitHostPort(tln.Addr().String())
	u.plain = &http.Server{Handler: u, ReadHeaderTimeout: 30 * time.Second}
	u.tls = &http.Server{Handler: u, ReadHeaderTimeout: 30 * time.Second}
	go u.plain.Serve(ln)
	go u.tls.Serve(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	return u, nil
}

func (u *upstream) close() {
	u.plain.Close()
	u.tls.Close()
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u.mu.Lock()
	u.seen[scheme+"://"+r.Host+r.URL.Path]++
	u.mu.Unlock()
	switch r.URL.Path {
	case "/big":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(u.size, 10))
		for left := u.size; left > 0; {
			b := u.block[:min(left, int64(len(u.block)))]
			if _, err := w.Write(b); err != nil {
				return
			}
			left -= int64(len(b))
		}
	case "/small":
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(smallBody)))
		io.WriteString(w, smallBody)
	default:
		http.NotFound(w, r)
	}
}

// count is how many requests reached key ("scheme://host:port/path").
func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[key]
}

// selfSigned makes the TLS upstream's certificate, for UpstreamHost and
// 127.0.0.1. Nobody verifies it.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: UpstreamHost},
		DNSNames:     []string{UpstreamHost},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
