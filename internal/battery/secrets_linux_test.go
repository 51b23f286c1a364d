package battery

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// echoUpstream is a TLS server for api.test, certified by the env's
// upstream CA, that records the Authorization header of every request and
// echoes it back, as a hostile or careless upstream would (SECURITY.md E34).
type echoUpstream struct {
	port string
	mu   sync.Mutex
	auth []string // "host auth"
}

func newEchoUpstream(t *testing.T, e *env) *echoUpstream {
	t.Helper()
	leaf, err := e.upstreamCA.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	u := &echoUpstream{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		u.mu.Lock()
		u.auth = append(u.auth, r.Host+" "+a)
		u.mu.Unlock()
		w.Header().Set("X-Echo", a)
		fmt.Fprintf(w, "auth=%s\n", a)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	return u
}

func (u *echoUpstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// TestSecrets runs SECURITY.md E31-E34 on every backend: a secret bound to
// one host and port reaches exactly that upstream, in exactly the bound
// header; the sandbox holds only a placeholder, anywhere it could look;
// an upstream that echoes the header back gives the sandbox the
// placeholder, never the value.
func TestSecrets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		up := newEchoUpstream(t, e)
		lo := netip.MustParseAddr("127.0.0.1")
		e.names.set(map[string][]netip.Addr{"api.test": {lo}, "other.test": {lo}})
		real := "real-secret-" + randHex(16)
		if err := e.m.SetSecret(t.Context(), "API_TOKEN", []byte(real)); err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Parse([]byte(fmt.Sprintf(`network:
  mode: allowlist
  allow: ["api.test:%[1]s", "other.test:%[1]s"]
secrets:
  API_TOKEN:
    hosts: ["api.test:%[1]s"]
    format: "Bearer {{value}}"
`, up.port)))
		if err != nil {
			t.Fatal(err)
		}
		w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "battery secrets"})
		if err != nil {
			t.Fatal(err)
		}
		x := &box{e: e, ws: w}
		copyFile(t, probeBin, x.files()+"/"+probeName, 0o755, sandboxUID, sandboxGID)
		if x.sb, err = e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Policy: &pol}); err != nil {
			t.Fatalf("CreateSandbox with a secret on %s: %v", e.name, err)
		}

		out := x.probe(t, "", "net",
			"https:https://api.test:"+up.port+"/bound",
			"https-insecure:https://other.test:"+up.port+"/unbound")
		t.Logf("%s: %s", e.name, out)
		got := kv(out)
		bound := got["https https://api.test:"+up.port+"/bound"]
		// E34: the echo comes back with the placeholder, the value never.
		if !strings.HasPrefix(bound, "200/auth=Bearer agentbox-secret-API_TOKEN-") {
			t.Errorf("the bound request: %q, want a 200 echoing the placeholder", bound)
		}
		if strings.Contains(out, real) {
			t.Errorf("the real value came back into the sandbox: %q", out)
		}
		// E33: the upstream got the real value on the bound host, and the
		// placeholder, unchanged, on the other.
		placeholder := strings.TrimPrefix(strings.SplitN(bound, "|", 2)[0], "200/auth=Bearer ")
		seen := up.got()
		if !slices.Contains(seen, "api.test:"+up.port+" Bearer "+real) {
			t.Errorf("the bound upstream did not get the real value: %q", seen)
		}
		if !slices.Contains(seen, "other.test:"+up.port+" Bearer "+placeholder) {
			t.Errorf("the unbound host did not get the placeholder unchanged: %q (placeholder %q)", seen, placeholder)
		}
		for _, s := range seen {
			if strings.HasPrefix(s, "other.test") && strings.Contains(s, real) {
				t.Errorf("the real value went to a host it is not bound to: %q", s)
			}
		}
		// E31, E32: the value is nowhere inside: environment, files,
		// mounts, processes.
		_, env, _ := x.sh(t, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/self/mountinfo")
		if strings.Contains(env, real) {
			t.Errorf("the real value is in the sandbox's environment or mounts")
		}
		if !strings.Contains(env, "API_TOKEN=agentbox-secret-API_TOKEN-") {
			t.Errorf("the placeholder is not in the environment: %q", env)
		}
		scan := x.probe(t, "control-"+real[:4]+"\n"+real+"\n", "scan", "/run/agentbox", "/tmp", "/workspace", "/etc", "/proc/self")
		for _, f := range linesWith(scan, "found") {
			if f[1] == "1" {
				t.Errorf("%s inside holds the real value", f[0])
			}
		}
		// E35: nothing of the CA's key is inside.
		if _, out, _ := x.sh(t, "grep -rl 'PRIVATE KEY' /run/agentbox /etc /tmp 2>/dev/null || true"); strings.TrimSpace(out) != "" {
			t.Errorf("a private key inside: %q", out)
		}
	})
}
