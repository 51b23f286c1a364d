package deps

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Allowlist is egress.Allowlist: the hosts a dial may reach.
type Allowlist = interface {
	Allowed(host string, port int) bool
}

// DialFunc dials address for the daemon through the egress proxy's checks
// (egress.Proxy.Dial), allowing only what allow allows.
type DialFunc func(ctx context.Context, allow Allowlist, network, address string) (net.Conn, error)

// Limits of a fetch.
const (
	// DefaultMaxArtifact caps an artifact's size.
	DefaultMaxArtifact = 64 << 20
	// DefaultMaxMetadata caps a registry's metadata document (an npm
	// packument; the abbreviated form of a large package is a few MB).
	DefaultMaxMetadata = 32 << 20
	// DefaultTimeout bounds one admission's fetches.
	DefaultTimeout = 5 * time.Minute
)

// Options configure an Admitter.
type Options struct {
	// Manifest is the operator's approved packages; nil approves none.
	Manifest *Manifest
	// Dial goes out through the egress proxy's checks. Required: there
	// is no direct dial.
	Dial DialFunc
	// TempDir holds artifacts while they stream and are verified; it
	// must be private to the daemon (the data dir's tmp).
	TempDir string
	// Logger receives a record per admission and denial.
	Logger *slog.Logger
	// MaxArtifact, MaxMetadata and Timeout default to the Default*
	// constants.
	MaxArtifact, MaxMetadata int64
	Timeout                  time.Duration

	// RootCAs verifies the sources' certificates; nil means the system's
	// roots.
	//
	// Test-only: no configuration file sets it. Tests give the root of
	// the registry they serve.
	RootCAs *tls.Config
}

// Admitter checks requests against the manifest and fetches what it
// admits. It implements manager.Dependencies.
type Admitter struct {
	o      Options
	client *http.Client
	allow  hostSet
}

// hostSet allows exactly its host:port pairs.
type hostSet []string

func (h hostSet) Allowed(host string, port int) bool {
	return slices.Contains(h, net.JoinHostPort(host, strconv.Itoa(port)))
}

// New returns an Admitter.
func New(o Options) (*Admitter, error) {
	if o.Dial == nil {
		return nil, errors.New("dependency admission: no egress dial")
	}
	if o.Manifest == nil {
		o.Manifest = &Manifest{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxArtifact <= 0 {
		o.MaxArtifact = DefaultMaxArtifact
	}
	if o.MaxMetadata <= 0 {
		o.MaxMetadata = DefaultMaxMetadata
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	a := &Admitter{o: o, allow: hostSet(o.Manifest.Hosts())}
	var tlsConf *tls.Config
	if o.RootCAs != nil {
		tlsConf = o.RootCAs.Clone()
	}
	a.client = &http.Client{
		Transport: &http.Transport{
			// Never the environment's proxy: the egress checks are the
			// way out.
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return o.Dial(ctx, a.allow, network, addr)
			},
			TLSClientConfig:        tlsConf,
			ForceAttemptHTTP2:      true,
			TLSHandshakeTimeout:    15 * time.Second,
			ResponseHeaderTimeout:  60 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
			IdleConnTimeout:        30 * time.Second,
			DisableCompression:     true,
		},
		// A redirect may stay on the source it started from, never leave it.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			if !sameOrigin(req.URL, via[0].URL) {
				return fmt.Errorf("redirect to %s leaves the pinned source %s", redact(req.URL), origin(via[0].URL))
			}
			return nil
		},
	}
	return a, nil
}

// Close releases idle connections.
func (a *Admitter) Close() { a.client.CloseIdleConnections() }

// Admit parses spec, checks it against the manifest and, if admitted,
// fetches and verifies the artifact. The returned body is the verified
// artifact (a private temporary file, gone once closed); the caller writes
// it into the workspace and closes it. The returned Dependency describes
// the request as far as it was understood, on a denial too. A denial is a
// *Denied (errdefs.ErrPolicyDenied); a source that cannot be reached is
// errdefs.ErrUnavailable.
func (a *Admitter) Admit(ctx context.Context, spec string) (apitypes.Dependency, io.ReadCloser, error) {
	req, err := ParseSpec(spec)
	if err != nil {
		return apitypes.Dependency{}, nil, err
	}
	dep := apitypes.Dependency{Ecosystem: req.Ecosystem, Name: req.Name, Version: req.Version}
	e, i, err := a.o.Manifest.check(req)
	if err != nil {
		a.o.Logger.InfoContext(ctx, "dependency denied", "spec", req.String(), "reason", reasonOf(err))
		return dep, nil, err
	}
	dep.Integrity, dep.Source = e.Integrity, e.Source
	ctx, cancel := context.WithTimeout(ctx, a.o.Timeout)
	defer cancel()
	var body *os.File
	switch e.Ecosystem {
	case EcosystemNPM:
		dep.Path = ".agentbox/deps/" + npmFile(e.Name, e.Version)
		dep.Install = "npm install --offline ./" + dep.Path
		body, dep.URL, dep.Size, err = a.fetchNPM(ctx, req, e, a.o.Manifest.sources[i], a.o.Manifest.digests[i])
	default:
		err = deny(req, "ecosystem %s is not supported", e.Ecosystem)
	}
	if err != nil {
		a.o.Logger.InfoContext(ctx, "dependency denied", "spec", req.String(), "reason", reasonOf(err))
		return dep, nil, err
	}
	a.o.Logger.InfoContext(ctx, "dependency admitted", "spec", req.String(), "integrity", dep.Integrity, "url", dep.URL, "size", dep.Size)
	return dep, body, nil
}

func reasonOf(err error) string {
	var d *Denied
	if errors.As(err, &d) {
		return d.Reason
	}
	return err.Error()
}

// get fetches u, which must be on the source src, and checks the status.
func (a *Admitter) get(ctx context.Context, r Request, u, src *url.URL, accept string) (*http.Response, error) {
	if !sameOrigin(u, src) || path.Clean(u.Path) != u.Path || !strings.HasPrefix(u.EscapedPath(), src.EscapedPath()+"/") {
		return nil, deny(r, "%s is not on the pinned source %s", redact(u), src)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", redact(u), errdefs.ErrInvalid)
	}
	hr.Header.Set("Accept", accept)
	hr.Header.Set("User-Agent", "agentbox-deps")
	resp, err := a.client.Do(hr)
	if err != nil {
		if errors.Is(err, errdefs.ErrPolicyDenied) {
			return nil, deny(r, "fetching %s: %v", redact(u), errors.Unwrap(err))
		}
		return nil, fmt.Errorf("fetching %s: %v: %w", redact(u), err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("fetching %s: the source has no such package (404): %w", redact(u), errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("fetching %s: status %d: %w", redact(u), resp.StatusCode, errdefs.ErrUnavailable)
	}
	return resp, nil
}

func sameOrigin(u, v *url.URL) bool {
	return u.Scheme == v.Scheme && hostPort(u) == hostPort(v) && u.User == nil
}

func origin(u *url.URL) string { return u.Scheme + "://" + u.Host }

// redact is u without credentials, query or fragment, for messages.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return strconv.Quote(c.String())
}
