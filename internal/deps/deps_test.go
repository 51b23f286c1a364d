package deps_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/deps/depstest"
	"github.com/agentbox/agentbox/internal/egress"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestParseSpec(t *testing.T) {
	for _, tt := range []struct {
		spec string
		want deps.Request
	}{
		{"npm:is-number@7.0.0", deps.Request{Ecosystem: "npm", Name: "is-number", Version: "7.0.0"}},
		{"npm:@types/node@20.1.0", deps.Request{Ecosystem: "npm", Name: "@types/node", Version: "20.1.0"}},
		{"npm:@types/node", deps.Request{Ecosystem: "npm", Name: "@types/node"}},
		{"npm:left-pad@^1.3.0", deps.Request{Ecosystem: "npm", Name: "left-pad", Version: "^1.3.0"}},
		{"pypi:requests@2.0.0", deps.Request{Ecosystem: "pypi", Name: "requests", Version: "2.0.0"}},
	} {
		got, err := deps.ParseSpec(tt.spec)
		if err != nil || got != tt.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tt.spec, got, err, tt.want)
		}
	}
	for _, spec := range []string{"", "is-number@7.0.0", "npm:", ":x@1.0.0", "npm:a\n@1.0.0", strings.Repeat("a", 600)} {
		if _, err := deps.ParseSpec(spec); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseSpec(%q) = %v, want invalid", spec, err)
		}
	}
}

const goodIntegrity = "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng=="

func TestNewManifest(t *testing.T) {
	ok := deps.Entry{Ecosystem: "npm", Name: "is-number", Version: "7.0.0", Integrity: goodIntegrity, Source: "https://registry.npmjs.org"}
	if _, err := deps.NewManifest([]deps.Entry{ok, {Ecosystem: "npm", Name: "@scope/pkg", Version: "1.0.0-rc.1", Integrity: goodIntegrity, Source: "https://mirror.example:8443/npm/"}}); err != nil {
		t.Fatalf("NewManifest: %v", err)
	}
	with := func(f func(*deps.Entry)) deps.Entry { e := ok; f(&e); return e }
	for _, tt := range []struct {
		e    deps.Entry
		want string
	}{
		{with(func(e *deps.Entry) { e.Ecosystem = "pypi" }), "ecosystem \"pypi\" is not one of npm"},
		{with(func(e *deps.Entry) { e.Name = "Is-Number" }), "not a valid npm package name"},
		{with(func(e *deps.Entry) { e.Name = "../x" }), "not a valid npm package name"},
		{with(func(e *deps.Entry) { e.Version = "^7.0.0" }), "not pinned"},
		{with(func(e *deps.Entry) { e.Version = "latest" }), "not pinned"},
		{with(func(e *deps.Entry) { e.Version = "7.0" }), "not pinned"},
		{with(func(e *deps.Entry) { e.Version = "" }), "no version"},
		{with(func(e *deps.Entry) { e.Integrity = "sha1-AAAA" }), "integrity must be sha512"},
		{with(func(e *deps.Entry) { e.Integrity = "sha512-AAAA" }), "integrity must be sha512"},
		{with(func(e *deps.Entry) { e.Source = "http://registry.npmjs.org" }), "not an https:// URL"},
		{with(func(e *deps.Entry) { e.Source = "https://u:p@registry.npmjs.org" }), "credentials"},
		{with(func(e *deps.Entry) { e.Source = "https://127.0.0.1" }), "names an IP address"},
		{with(func(e *deps.Entry) { e.Source = "https://registry.npmjs.org/?x=1" }), "query"},
		{with(func(e *deps.Entry) { e.Source = "" }), "is not a URL"},
		{with(func(e *deps.Entry) { e.Source = "https://Registry.npmjs.org" }), "as the egress proxy sees it"},
		{with(func(e *deps.Entry) { e.Source = "https://registry.npmjs.org./" }), "as the egress proxy sees it"},
	} {
		_, err := deps.NewManifest([]deps.Entry{tt.e})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "dependencies.approved[0]") {
			t.Errorf("NewManifest(%+v) = %v, want invalid saying %q", tt.e, err, tt.want)
		}
	}
	if _, err := deps.NewManifest([]deps.Entry{ok, ok}); err == nil || !strings.Contains(err.Error(), "listed already") {
		t.Errorf("a duplicate entry: %v", err)
	}
}

// admitter is an Admitter whose fetches go through a real egress proxy
// (production address rules plus the test's allowance for the
// registry's name) to reg.
func admitter(t *testing.T, reg *depstest.Registry, entries ...deps.Entry) (*deps.Admitter, *egress.Proxy) {
	t.Helper()
	m, err := deps.NewManifest(entries)
	if err != nil {
		t.Fatal(err)
	}
	p := depstest.Proxy(t, egress.Options{})
	a, err := deps.New(deps.Options{Manifest: m, Dial: depstest.Dial(p), TempDir: t.TempDir(), RootCAs: reg.Roots()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, p
}

func TestAdmit(t *testing.T) {
	pad := depstest.NPMPackage(t, "left-pad", "1.3.0", map[string]string{"index.js": "module.exports = (s, n) => String(s).padStart(n);\n"})
	scoped := depstest.NPMPackage(t, "@acme/util", "2.0.0", map[string]string{"index.js": "module.exports = 2;\n"})
	reg := depstest.NewRegistry(t, pad, scoped)
	a, p := admitter(t, reg, reg.Entry(pad), reg.Entry(scoped))

	for _, tt := range []struct {
		spec, path string
		pkg        depstest.Package
	}{
		{"npm:left-pad@1.3.0", ".agentbox/deps/left-pad-1.3.0.tgz", pad},
		{"npm:@acme/util@2.0.0", ".agentbox/deps/acme-util-2.0.0.tgz", scoped},
	} {
		dep, body, err := a.Admit(t.Context(), tt.spec)
		if err != nil {
			t.Fatalf("Admit(%s): %v", tt.spec, err)
		}
		got, _ := io.ReadAll(body)
		body.Close()
		if string(got) != string(tt.pkg.Tarball) {
			t.Errorf("Admit(%s): %d bytes, not the package's %d", tt.spec, len(got), len(tt.pkg.Tarball))
		}
		if dep.Path != tt.path || dep.Integrity != tt.pkg.Integrity || dep.Size != int64(len(tt.pkg.Tarball)) ||
			dep.Source != reg.URL || !strings.HasPrefix(dep.URL, reg.URL+"/") || dep.Install != "npm install --offline ./"+tt.path {
			t.Errorf("Admit(%s) = %+v", tt.spec, dep)
		}
	}
	if n := p.ResolveAllowanceUses(); n < 1 {
		t.Errorf("the fetches used the resolve allowance %d times: they did not go through the proxy's checks", n)
	}
	if got := strings.Join(reg.Requests(), " "); !strings.Contains(got, "/@acme%2futil") {
		t.Errorf("the scoped package's document was asked as %s, want /@acme%%2futil", got)
	}
}

func TestAdmitDenied(t *testing.T) {
	pad := depstest.NPMPackage(t, "left-pad", "1.3.0", map[string]string{"index.js": "module.exports = 1;\n"})
	tampered := depstest.NPMPackage(t, "tampered", "1.0.0", map[string]string{"index.js": "module.exports = 'good';\n"})
	claims := depstest.NPMPackage(t, "claims", "1.0.0", nil)
	elsewhere := depstest.NPMPackage(t, "elsewhere", "1.0.0", nil)
	reg := depstest.NewRegistry(t, pad, tampered, claims, elsewhere)
	evil := depstest.NPMPackage(t, "tampered", "1.0.0", map[string]string{"index.js": "require('child_process').exec('curl evil');\n"})
	reg.ServeTarball("tampered", evil.Tarball)
	reg.ClaimIntegrity("claims", evil.Integrity)
	reg.TarballURL("elsewhere", fmt.Sprintf("https://other.test:%d/elsewhere/-/elsewhere-1.0.0.tgz", reg.Port))
	dots := depstest.NPMPackage(t, "dots", "1.0.0", nil)
	reg.Add(dots)
	reg.TarballURL("dots", reg.URL+"/dots/../elsewhere/-/elsewhere-1.0.0.tgz")
	// A source the operator allowed no internal address for.
	unallowed := reg.Entry(depstest.NPMPackage(t, "unallowed", "1.0.0", nil))
	unallowed.Source = fmt.Sprintf("https://other.test:%d", reg.Port)
	a, _ := admitter(t, reg, reg.Entry(pad), reg.Entry(tampered), reg.Entry(claims), reg.Entry(elsewhere), reg.Entry(dots), unallowed)

	for _, tt := range []struct {
		spec, want string
		// fetched: the registry was asked (the manifest alone did not decide).
		fetched bool
	}{
		{"npm:event-stream@3.3.6", "npm package event-stream is not in the approved manifest", false},
		{"npm:left-pad@^1.3.0", `version "^1.3.0" is not pinned`, false},
		{"npm:left-pad@~1.3", `version "~1.3" is not pinned`, false},
		{"npm:left-pad@latest", `version "latest" is not pinned`, false},
		{"npm:left-pad@*", `version "*" is not pinned`, false},
		{"npm:left-pad@1.x", `version "1.x" is not pinned`, false},
		{"npm:left-pad", "no version", false},
		{"npm:left-pad@1.3.1", "version 1.3.1 is not approved (approved: 1.3.0)", false},
		{"pypi:requests@2.31.0", `ecosystem "pypi" is not supported`, false},
		{"npm:tampered@1.0.0", "digest mismatch: the artifact from", true},
		{"npm:claims@1.0.0", "is not the approved digest " + claims.Integrity, true},
		{"npm:elsewhere@1.0.0", "is not on the pinned source " + reg.URL, true},
		{"npm:dots@1.0.0", "is not on the pinned source", true},
		{"npm:unallowed@1.0.0", "forbidden address 127.0.0.1 (loopback)", false},
	} {
		before := len(reg.Requests())
		dep, body, err := a.Admit(t.Context(), tt.spec)
		var denied *deps.Denied
		if !errors.As(err, &denied) || !errors.Is(err, errdefs.ErrPolicyDenied) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Admit(%s) = %v, want denied: %s", tt.spec, err, tt.want)
		}
		if body != nil {
			t.Errorf("Admit(%s) returned a body with its denial", tt.spec)
		}
		if !strings.HasPrefix(err.Error(), "dependency "+tt.spec+" denied: ") {
			t.Errorf("Admit(%s): the error %q does not name the request", tt.spec, err)
		}
		if got := len(reg.Requests()) > before; got != tt.fetched {
			t.Errorf("Admit(%s): registry asked: %v, want %v", tt.spec, got, tt.fetched)
		}
		if r, _ := deps.ParseSpec(tt.spec); dep.Name != r.Name || dep.Version != r.Version {
			t.Errorf("Admit(%s): the denial describes %+v", tt.spec, dep)
		}
	}
}
