package battery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// fakeResolver is the egress proxy's resolver in the battery: names under
// .test map to loopback addresses, and every lookup is recorded, so that a
// test can tell which names the proxy asked for (SECURITY.md D23).
type fakeResolver struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	lookups []string
}

func (r *fakeResolver) set(names map[string][]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = names
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups = append(r.lookups, host)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) asked(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.lookups, host)
}

// upstream is a recording HTTP server on this machine: every request that
// reaches it is noted with its Host header.
type upstream struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	seen []string // "host path"
}

func newUpstream(t *testing.T, tlsOn bool, addr string) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Host+" "+r.URL.Path)
		u.mu.Unlock()
		fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	u.srv.Listener = ln
	if tlsOn {
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	return u
}

func (u *upstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// hostIP is an address of this machine other than loopback, if it has one.
func hostIP() string {
	ifs, _ := net.InterfaceAddrs()
	for _, a := range ifs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	return ""
}

// TestNetwork runs SECURITY.md D21-D30 on every backend: with the
// default policy nothing gets out; with an allowlist, exactly the
// canonical allowed host and port pass, through the egress proxy, and
// every decision is in the event log. The oracles are on the host: what
// the upstreams received and which names the proxy resolved.
func TestNetwork(t *testing.T) {
	forBackends(t, withKubernetes, func(t *testing.T, e *env) {
		// Plain HTTP on every address of this machine (so that a
		// sandbox could reach it by the host's address, were it not
		// cut off), TLS on loopback.
		web := newUpstream(t, false, "0.0.0.0:0")
		tlsWeb := newUpstream(t, true, "127.0.0.1:0")
		lo := netip.MustParseAddr("127.0.0.1")
		e.names.set(map[string][]netip.Addr{
			"allowed.test": {lo},
			"other.test":   {lo},
			// Allowed names that resolve to what the proxy must refuse:
			// another loopback address, and a mix.
			"loop.test":  {netip.MustParseAddr("127.0.0.2")},
			"mixed.test": {lo, netip.MustParseAddr("127.0.0.3")},
		})
		t.Run("D21 default policy", func(t *testing.T) { testNoNetwork(t, e, web) })
		t.Run("D22-D28 allowlist", func(t *testing.T) { testAllowlist(t, e, web, tlsWeb) })
		t.Run("D29 ports", func(t *testing.T) { testPorts(t, e) })
	})
}

func testNoNetwork(t *testing.T, e *env, web *upstream) {
	x := e.newBox(t, sandbox.Limits{})
	before := len(web.got())
	probes := []string{"dial:127.0.0.1:" + web.port, "dns:allowed.test", "udp:127.0.0.1:53",
		"get:http://allowed.test:" + web.port + "/", "stat:" + guest.DefaultEgressSocketPath}
	ip := hostIP()
	if ip != "" {
		// Control: the upstream answers on this address from the host.
		if c, err := net.Dial("tcp", net.JoinHostPort(ip, web.port)); err != nil {
			t.Fatalf("control: the upstream does not answer on %s: %v", ip, err)
		} else {
			c.Close()
		}
		probes = append(probes, "dial:"+net.JoinHostPort(ip, web.port))
	}
	got := kv(x.probe(t, "", append([]string{"net"}, probes...)...))
	for _, p := range probes {
		k := strings.Replace(p, ":", " ", 1)
		if v, ok := got[k]; !ok || v == "0" || strings.HasPrefix(v, "200") {
			t.Errorf("%s inside a sandbox without network: %q", p, v)
		}
	}
	if _, out, _ := x.sh(t, `env | grep -i _proxy || echo none`); out != "none\n" {
		t.Errorf("proxy variables in a sandbox without network: %q", out)
	}
	if n := len(web.got()); n != before {
		t.Errorf("the upstream received %d requests from a sandbox without network", n-before)
	}
}

func testAllowlist(t *testing.T, e *env, web, tlsWeb *upstream) {
	pol, err := policy.Parse([]byte(fmt.Sprintf(`network:
  mode: allowlist
  allow: ["allowed.test:%s", "allowed.test:%s", "loop.test:%s", "mixed.test:%s"]
`, web.port, tlsWeb.port, web.port, web.port)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "battery network"})
	if err != nil {
		t.Fatal(err)
	}
	x := &box{e: e, ws: w}
	copyFile(t, probeBin, x.files()+"/"+probeName, 0o755, sandboxUID, sandboxGID)
	if x.sb, err = e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Policy: &pol}); err != nil {
		t.Fatalf("CreateSandbox with an allowlist on %s: %v", e.name, err)
	}
	p, tp := web.port, tlsWeb.port
	other := strconv.Itoa(otherPort(t))
	probes := []struct {
		probe string
		want  string // a prefix of the result; "!" means any failure
	}{
		{"get:http://allowed.test:" + p + "/a", "200/upstream_/a"},
		{"proxy:http://ALLOWED.test.:" + p + "/b", "200/upstream_/b"},
		{"proxy:http://other.test:" + p + "/c", "403"},
		{"proxy:http://allowed.test:" + other + "/d", "403"},
		{"proxy:http://127.0.0.1:" + p + "/e", "403"},
		{"proxy:http://2130706433:" + p + "/f", "403"},
		{"proxy:http://[::ffff:127.0.0.1]:" + p + "/g", "403"},
		{"proxy:http://loop.test:" + p + "/h", "403"},
		{"proxy:http://mixed.test:" + p + "/i", "403"},
		{"proxy:http://allowed.test.other.test:" + p + "/j", "403"},
		{"proxy:http://allowed.testx:" + p + "/k", "403"},
		{"noproxy:http://allowed.test:" + p + "/l", "!"},
		{"dial:127.0.0.1:" + p, "!"},
		{"connect:allowed.test:" + tp + ":allowed.test", "200/upstream_/tls"},
		{"connect:allowed.test:" + tp + ":evil.test", "!"},
		{"connect:other.test:" + tp + ":other.test", "403"},
		{"connect:allowed.test:" + p + ":allowed.test", "!"},
		// D28: no protocol switch opens a path the proxy cannot see.
		{"upgrade:h2c:http://allowed.test:" + p + "/m", "4"},
		{"upgrade:websocket:http://allowed.test:" + p + "/n", "4"},
	}
	var args []string
	for _, pr := range probes {
		args = append(args, pr.probe)
	}
	if ip := hostIP(); ip != "" {
		probes = append(probes, struct{ probe, want string }{"dial:" + net.JoinHostPort(ip, p), "!"})
		args = append(args, "dial:"+net.JoinHostPort(ip, p))
	}
	out := x.probe(t, "", append([]string{"net"}, args...)...)
	t.Logf("%s: %s", e.name, out)
	got := kv(out)
	for _, pr := range probes {
		v, ok := got[strings.Replace(pr.probe, ":", " ", 1)]
		switch {
		case !ok:
			t.Errorf("%s: no result in %q", pr.probe, out)
		case pr.want == "!" && (v == "0" || strings.HasPrefix(v, "200")):
			t.Errorf("%s got through: %q", pr.probe, v)
		case pr.want != "!" && !strings.HasPrefix(v, pr.want):
			t.Errorf("%s = %q, want %s...", pr.probe, v, pr.want)
		}
	}
	// The host's oracles: exactly the allowed requests arrived, each
	// under the canonical name, and no name outside the allowlist was
	// ever resolved.
	wantSeen := []string{"allowed.test:" + p + " /a", "allowed.test:" + p + " /b"}
	for _, s := range web.got() {
		if !slices.Contains(wantSeen, s) {
			t.Errorf("the upstream received %q", s)
		}
	}
	for _, s := range wantSeen {
		if !slices.Contains(web.got(), s) {
			t.Errorf("the upstream never received %q", s)
		}
	}
	if tls := tlsWeb.got(); len(tls) != 1 || !strings.HasSuffix(tls[0], " /tls") {
		t.Errorf("the TLS upstream received %q, want exactly the one request with the right name", tls)
	}
	for _, name := range []string{"other.test", "allowed.test.other.test", "allowed.testx", "evil.test"} {
		if e.names.asked(name) {
			t.Errorf("the proxy resolved %s, which no policy allows (D23)", name)
		}
	}
	// D30: every decision is in the event log, with host, bytes and the
	// sandbox. A decision is recorded when its connection has ended, which
	// may be a moment after the probe read its answer: poll.
	var evs []store.Event
	allowed, denied := 0, 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if evs, err = e.st.ListEvents(context.Background(), store.EventFilter{SandboxID: x.sb.ID}); err != nil {
			t.Fatal(err)
		}
		allowed, denied = 0, 0
		for _, ev := range evs {
			switch ev.Type {
			case "egress.allowed":
				allowed++
			case "egress.denied":
				denied++
			}
		}
		if (allowed >= 3 && denied >= 9) || time.Now().After(deadline) {
			break
		}
	}
	for _, ev := range evs {
		var d struct {
			Host      string `json:"host"`
			BytesDown int64  `json:"bytes_down"`
		}
		json.Unmarshal([]byte(ev.Detail), &d)
		if ev.Type == "egress.allowed" && (d.Host != "allowed.test" || d.BytesDown <= 0) {
			t.Errorf("allowed egress event %s", ev.Detail)
		}
	}
	if allowed < 3 || denied < 9 {
		t.Errorf("egress events: %d allowed, %d denied; want 3 and at least 9:\n%v", allowed, denied, evs)
	}
	// Metering: what the allowed connections moved counts for the sandbox
	// and for its task.
	su, err := e.m.SandboxUsage(context.Background(), x.sb.ID)
	if err != nil || su.EgressBytesUp <= 0 || su.EgressBytesDown <= 0 {
		t.Errorf("sandbox egress usage = %+v, %v", su, err)
	}
	tu, err := e.m.Usage(context.Background(), store.UsageFilter{Task: w.Task})
	if err != nil || len(tu) != 1 || tu[0].EgressBytesDown != su.EgressBytesDown || tu[0].EgressBytesUp != su.EgressBytesUp {
		t.Errorf("task egress usage = %+v, %v; sandbox %+v", tu, err, su)
	}
}

// otherPort is a TCP port nothing listens on.
func otherPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// testPorts: a port a sandbox listens on, on any address, is reachable
// from inside that sandbox (the control) and from nowhere else: not from
// another sandbox, not from the host.
func testPorts(t *testing.T, e *env) {
	a := e.newBox(t, sandbox.Limits{})
	b := e.newBox(t, sandbox.Limits{})
	p1, p2 := strconv.Itoa(otherPort(t)), strconv.Itoa(otherPort(t))
	any, lo := "0.0.0.0:"+p1, "127.0.0.1:"+p2
	out := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.m.Exec(ctx, a.ws.ID, guest.ExecRequest{Argv: []string{probePath, "listen", any, lo}, Env: defaultEnv, Timeout: 2 * time.Minute}, nil, out, io.Discard)
	}()
	t.Cleanup(func() { cancel(); <-done })
	if !eventually(15*time.Second, func() bool { return strings.Count(out.String(), "listening") == 2 }) {
		t.Fatalf("the listener in the first sandbox did not start: %q", out.String())
	}
	targets := []string{"dial:127.0.0.1:" + p1, "dial:127.0.0.1:" + p2}
	if got := kv(a.probe(t, "", append([]string{"net"}, targets...)...)); got["dial 127.0.0.1:"+p1] != "0" || got["dial 127.0.0.1:"+p2] != "0" {
		t.Fatalf("control: the sandbox cannot reach its own listener: %v", got)
	}
	for k, v := range kv(b.probe(t, "", append([]string{"net"}, targets...)...)) {
		if v == "0" {
			t.Errorf("another sandbox reaches the first one's port: %s", k)
		}
	}
	for _, hp := range []string{"127.0.0.1:" + p1, "127.0.0.1:" + p2} {
		if c, err := net.DialTimeout("tcp", hp, 2*time.Second); err == nil {
			c.Close()
			t.Errorf("the host reaches %s, a port opened inside a sandbox", hp)
		}
	}
}
