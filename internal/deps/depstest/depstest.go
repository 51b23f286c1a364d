// Package depstest serves a real npm registry over TLS on loopback for the
// tests of dependency admission, reached the way the daemon reaches a
// real one: through the egress proxy's checks, with an operator's resolve
// allowance letting the registry's name resolve to loopback.
package depstest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/egress"
)

// Host is the registry's name: under .test, known only to the proxy's
// resolver here.
const Host = "registry.test"

// Package is an npm package the registry serves.
type Package struct {
	Name, Version string
	// Tarball is the artifact; Integrity its sha512 SRI.
	Tarball   []byte
	Integrity string
}

// NPMPackage builds a package tarball as `npm pack` lays it out: every
// file under package/, package.json among them.
func NPMPackage(t testing.TB, name, version string, files map[string]string) Package {
	t.Helper()
	pj, _ := json.Marshal(map[string]any{"name": name, "version": version, "main": "index.js", "license": "MIT"})
	all := map[string]string{"package.json": string(pj)}
	for k, v := range files {
		all[k] = v
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range []string{"package.json", "index.js"} {
		if body, ok := all[n]; ok {
			writeEntry(t, tw, n, body)
			delete(all, n)
		}
	}
	for n, body := range all {
		writeEntry(t, tw, n, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return Package{Name: name, Version: version, Tarball: buf.Bytes(), Integrity: Integrity(buf.Bytes())}
}

func writeEntry(t testing.TB, tw *tar.Writer, name, body string) {
	h := &tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(499162500, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(h); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
}

// Integrity is b's sha512 subresource-integrity string.
func Integrity(b []byte) string {
	d := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(d[:])
}

// Registry is an npm registry on loopback, over TLS.
type Registry struct {
	srv *httptest.Server
	// URL is its base URL by name: https://registry.test:PORT.
	URL string
	// Port is its port on 127.0.0.1.
	Port int

	mu       sync.Mutex
	pkgs     map[string]Package
	served   map[string][]byte // tarball path -> the bytes served, when not the package's own
	docInteg map[string]string // name -> the integrity the document claims, when not the package's own
	tarURL   map[string]string // name -> the tarball URL the document gives, when not the registry's
	requests []string
	cert     cert
}

type cert struct {
	tls  tls.Certificate
	leaf *x509.Certificate
}

// certFor makes a self-signed certificate for names.
func certFor(t testing.TB, names ...string) cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert{tls: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, leaf: leaf}
}

// NewRegistry starts a registry serving pkgs; it stops with the test.
func NewRegistry(t testing.TB, pkgs ...Package) *Registry {
	r := &Registry{pkgs: map[string]Package{}, served: map[string][]byte{}, docInteg: map[string]string{}, tarURL: map[string]string{}}
	for _, p := range pkgs {
		r.pkgs[p.Name] = p
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.cert = certFor(t, Host, "other.test")
	r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{r.cert.tls}}
	r.srv.StartTLS()
	t.Cleanup(r.srv.Close)
	ap := netip.MustParseAddrPort(r.srv.Listener.Addr().String())
	r.Port = int(ap.Port())
	r.URL = fmt.Sprintf("https://%s:%d", Host, r.Port)
	return r
}

// tarPath is where the registry serves a package's tarball.
func tarPath(p Package) string {
	base := p.Name[strings.LastIndexByte(p.Name, '/')+1:]
	return "/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"
}

// Add serves p too.
func (r *Registry) Add(p Package) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pkgs[p.Name] = p
}

// ServeTarball makes the registry serve body instead of name's own
// tarball, its document unchanged: a tampered artifact.
func (r *Registry) ServeTarball(name string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served[tarPath(r.pkgs[name])] = body
}

// ClaimIntegrity makes the document claim integrity for name.
func (r *Registry) ClaimIntegrity(name, integrity string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.docInteg[name] = integrity
}

// TarballURL makes the document give u as name's tarball.
func (r *Registry) TarballURL(name, u string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tarURL[name] = u
}

// Requests are the paths asked for so far.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.requests...)
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, req.URL.EscapedPath())
	path := req.URL.Path
	for _, p := range r.pkgs {
		switch path {
		case "/" + p.Name:
			integ := p.Integrity
			if v, ok := r.docInteg[p.Name]; ok {
				integ = v
			}
			tu := r.URL + tarPath(p)
			if v, ok := r.tarURL[p.Name]; ok {
				tu = v
			}
			doc := map[string]any{"name": p.Name, "dist-tags": map[string]string{"latest": p.Version},
				"versions": map[string]any{p.Version: map[string]any{"name": p.Name, "version": p.Version,
					"dist": map[string]string{"tarball": tu, "integrity": integ}}}}
			w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
			json.NewEncoder(w).Encode(doc)
			return
		case tarPath(p):
			body := p.Tarball
			if b, ok := r.served[path]; ok {
				body = b
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(body)
			return
		}
	}
	http.NotFound(w, req)
}

// Roots trusts the registry's certificate.
func (r *Registry) Roots() *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(r.cert.leaf)
	return &tls.Config{RootCAs: pool}
}

// Entry is the manifest entry approving p from this registry.
func (r *Registry) Entry(p Package) deps.Entry {
	return deps.Entry{Ecosystem: deps.EcosystemNPM, Name: p.Name, Version: p.Version, Integrity: p.Integrity, Source: r.URL}
}

// Resolver answers for names under .test from a table, as the test
// configures it.
type Resolver map[string][]netip.Addr

func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Proxy is an egress proxy with production address rules (no AllowAddr),
// whose resolver sends Host to 127.0.0.1, and the operator's allowance
// letting Host, and only it, resolve there. logs receives its log.
func Proxy(t testing.TB, opts egress.Options) *egress.Proxy {
	t.Helper()
	a, err := egress.ParseResolveAllowance(Host, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	opts.ResolveAllow = append(opts.ResolveAllow, a)
	if opts.Resolver == nil {
		opts.Resolver = Resolver{Host: {netip.MustParseAddr("127.0.0.1")}, "other.test": {netip.MustParseAddr("127.0.0.1")}}
	}
	return egress.New(opts)
}

// Dial is the DialFunc of an Admitter going out through p.
func Dial(p *egress.Proxy) deps.DialFunc {
	return func(ctx context.Context, allow deps.Allowlist, network, address string) (net.Conn, error) {
		return p.Dial(ctx, "dependencies", allow, network, address)
	}
}
