// Package deps admits the packages an agent asks for. The operator
// approves packages in the daemon's configuration (dependencies.approved):
// each an ecosystem, a name, one exact version, its digest and the source
// it must come from. A request is checked against that manifest; an
// unlisted package, a version that is not pinned (a range, a tag) or a
// version not approved is denied with a reason the agent can read. An
// admitted artifact is fetched by the daemon from its pinned source
// through the egress proxy's own checks (egress.Proxy.Dial), its digest
// verified while it streams to a private temporary file, and only then
// handed to the manager, which writes it into the workspace. The sandbox
// installs it from there, offline: its network stays off.
package deps

import (
	"bytes"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// EcosystemNPM is the npm registry ecosystem.
const EcosystemNPM = "npm"

// Ecosystems are the ecosystems the daemon admits packages of.
var Ecosystems = []string{EcosystemNPM}

// Entry is one approved package in the operator's manifest.
type Entry struct {
	// Ecosystem is "npm".
	Ecosystem string `json:"ecosystem"`
	// Name is the package's name as its ecosystem spells it
	// ("is-number", "@scope/name").
	Name string `json:"name"`
	// Version is one exact version ("7.0.0"): never a range or a tag.
	Version string `json:"version"`
	// Integrity is the artifact's digest as a subresource-integrity
	// string: for npm the registry's dist.integrity, "sha512-BASE64".
	Integrity string `json:"integrity"`
	// Source is the registry's base URL the artifact must come from
	// ("https://registry.npmjs.org").
	Source string `json:"source"`
}

// Request is one package an agent asks for.
type Request struct {
	Ecosystem, Name, Version string
}

// String is the request as a spec: "npm:NAME@VERSION".
func (r Request) String() string {
	s := r.Ecosystem + ":" + r.Name
	if r.Version != "" {
		s += "@" + r.Version
	}
	return s
}

// Denied is a request the manifest or the source's answer refused. It is
// an errdefs.ErrPolicyDenied; Reason is written for the agent to read.
type Denied struct {
	Request Request
	Reason  string
}

func (e *Denied) Error() string {
	return fmt.Sprintf("dependency %s denied: %s", e.Request, e.Reason)
}

func (e *Denied) Unwrap() error { return errdefs.ErrPolicyDenied }

func deny(r Request, format string, args ...any) error {
	return &Denied{Request: r, Reason: fmt.Sprintf(format, args...)}
}

// maxSpec bounds a spec; npm names are at most 214 bytes.
const maxSpec = 512

// ParseSpec reads "ECOSYSTEM:NAME@VERSION" ("npm:is-number@7.0.0",
// "npm:@scope/name@1.2.3"). A missing version is left empty, for Check to
// deny as unpinned; only what cannot be read as a request at all is an
// error (errdefs.ErrInvalid).
func ParseSpec(spec string) (Request, error) {
	if len(spec) > maxSpec {
		return Request{}, errdefs.Invalid("dependency spec of %d bytes: over %d", len(spec), maxSpec)
	}
	eco, rest, ok := strings.Cut(spec, ":")
	if !ok || eco == "" || rest == "" {
		return Request{}, errdefs.Invalid("dependency spec %s: write ECOSYSTEM:NAME@VERSION, e.g. npm:is-number@7.0.0", strconv.Quote(spec))
	}
	r := Request{Ecosystem: eco, Name: rest}
	// A scoped npm name starts with @: the version's @ is a later one.
	if i := strings.LastIndexByte(rest, '@'); i > 0 {
		r.Name, r.Version = rest[:i], rest[i+1:]
	}
	if r.Name == "" || strings.ContainsFunc(spec, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return Request{}, errdefs.Invalid("dependency spec %s: write ECOSYSTEM:NAME@VERSION, e.g. npm:is-number@7.0.0", strconv.Quote(spec))
	}
	return r, nil
}

var (
	// npmName is npm's rule for new package names: lower case, URL-safe,
	// not starting with a dot or an underscore, optionally scoped.
	npmName = regexp.MustCompile(`^(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*$`)
	// exactVersion is a semantic version and nothing else: no range
	// operator, no wildcard, no tag.
	exactVersion = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
)

// maxNPMName is npm's limit on a package name.
const maxNPMName = 214

func checkName(eco, name string) string {
	switch eco {
	case EcosystemNPM:
		if len(name) > maxNPMName || !npmName.MatchString(name) {
			return fmt.Sprintf("%s is not a valid npm package name", strconv.Quote(name))
		}
	}
	return ""
}

// pinned says why version is not one exact version, or "".
func pinned(version string) string {
	switch {
	case version == "":
		return "no version: ask for one exact version (npm:NAME@1.2.3)"
	case len(version) > 64 || !exactVersion.MatchString(version):
		return fmt.Sprintf("version %s is not pinned: a range or a tag (^1.2.0, ~1.2, 1.x, *, >=1, latest) can resolve to code nobody approved; ask for one exact version", strconv.Quote(version))
	}
	return ""
}

// sriSHA512 decodes a sha512 subresource-integrity string. A string with
// several digests (space-separated, as npm may give) yields its sha512.
func sriSHA512(s string) ([]byte, bool) {
	for _, f := range strings.Fields(s) {
		alg, b64, ok := strings.Cut(f, "-")
		if !ok || alg != "sha512" {
			continue
		}
		// Options ("?opt") are allowed by the SRI grammar and mean nothing
		// here.
		b64, _, _ = strings.Cut(b64, "?")
		d, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(d) != sha512.Size {
			return nil, false
		}
		return d, true
	}
	return nil, false
}

// sriString is a sha512 digest as a subresource-integrity string.
func sriString(d []byte) string { return "sha512-" + base64.StdEncoding.EncodeToString(d) }

// Manifest is the operator's approved packages, validated.
type Manifest struct {
	entries []Entry
	// digests are the entries' decoded sha512 digests.
	digests [][]byte
	// sources are the entries' parsed sources.
	sources []*url.URL
}

// NewManifest checks every entry and returns the manifest, or every
// problem at once (errdefs.ErrInvalid), each naming its entry as
// dependencies.approved[i].
func NewManifest(entries []Entry) (*Manifest, error) {
	m := &Manifest{}
	var probs []string
	seen := map[string]int{}
	for i, e := range entries {
		at := fmt.Sprintf("dependencies.approved[%d]", i)
		if !slices.Contains(Ecosystems, e.Ecosystem) {
			probs = append(probs, fmt.Sprintf("%s: ecosystem %s is not one of %s", at, strconv.Quote(e.Ecosystem), strings.Join(Ecosystems, ", ")))
			continue
		}
		if why := checkName(e.Ecosystem, e.Name); why != "" {
			probs = append(probs, at+": "+why)
			continue
		}
		if why := pinned(e.Version); why != "" {
			probs = append(probs, fmt.Sprintf("%s (%s): %s", at, e.Name, why))
			continue
		}
		d, ok := sriSHA512(e.Integrity)
		if !ok {
			probs = append(probs, fmt.Sprintf("%s (%s@%s): integrity must be sha512-BASE64 of a 64-byte digest (npm view %s@%s dist.integrity)", at, e.Name, e.Version, e.Name, e.Version))
			continue
		}
		u, why := checkSource(e.Source)
		if why != "" {
			probs = append(probs, fmt.Sprintf("%s (%s@%s): source %s", at, e.Name, e.Version, why))
			continue
		}
		key := e.Ecosystem + ":" + e.Name + "@" + e.Version
		if j, ok := seen[key]; ok {
			probs = append(probs, fmt.Sprintf("%s: %s is listed already as dependencies.approved[%d]", at, key, j))
			continue
		}
		seen[key] = i
		e.Integrity = sriString(d)
		m.entries = append(m.entries, e)
		m.digests = append(m.digests, d)
		m.sources = append(m.sources, u)
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("%s: %w", strings.Join(probs, "; "), errdefs.ErrInvalid)
	}
	return m, nil
}

// checkSource parses a registry base URL: https, a host name (the egress
// checks refuse IP literals), no credentials, query or fragment.
func checkSource(s string) (*url.URL, string) {
	u, err := url.Parse(s)
	switch {
	case err != nil || s == "":
		return nil, fmt.Sprintf("%s is not a URL", strconv.Quote(s))
	case u.Scheme != "https":
		return nil, fmt.Sprintf("%s is not an https:// URL", strconv.Quote(s))
	case u.User != nil:
		return nil, fmt.Sprintf("%s carries credentials: the sources are public or reached through an operator's mirror", strconv.Quote(s))
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Sprintf("%s has a query or fragment", strconv.Quote(s))
	case net.ParseIP(u.Hostname()) != nil:
		return nil, fmt.Sprintf("%s names an IP address: name the host (and allow its addresses with egress.resolve_allow if they are internal)", strconv.Quote(s))
	}
	// The egress checks see the canonical host; so must the allowlist
	// built from the sources.
	if h, err := policy.CanonicalHost(u.Hostname()); err != nil || h != u.Hostname() {
		return nil, fmt.Sprintf("%s: write the host as the egress proxy sees it (lower case, ASCII, no trailing dot)", strconv.Quote(s))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Sprintf("%s has an invalid port", strconv.Quote(s))
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u, ""
}

// Entries returns the approved entries (canonical integrity strings).
func (m *Manifest) Entries() []Entry { return slices.Clone(m.entries) }

// Check decides a request: the approved entry, or a *Denied saying why
// not. The order of the checks makes the reason the most useful one: an
// unsupported ecosystem, then a version that is not pinned (whatever the
// name), then a name not listed, then a version not approved.
func (m *Manifest) Check(r Request) (Entry, error) {
	e, _, err := m.check(r)
	return e, err
}

func (m *Manifest) check(r Request) (Entry, int, error) {
	if !slices.Contains(Ecosystems, r.Ecosystem) {
		return Entry{}, -1, deny(r, "ecosystem %s is not supported (%s)", strconv.Quote(r.Ecosystem), strings.Join(Ecosystems, ", "))
	}
	if why := checkName(r.Ecosystem, r.Name); why != "" {
		return Entry{}, -1, deny(r, "%s", why)
	}
	if why := pinned(r.Version); why != "" {
		return Entry{}, -1, deny(r, "%s", why)
	}
	var versions []string
	for i, e := range m.entries {
		if e.Ecosystem != r.Ecosystem || e.Name != r.Name {
			continue
		}
		if e.Version == r.Version {
			return e, i, nil
		}
		versions = append(versions, e.Version)
	}
	if len(versions) == 0 {
		return Entry{}, -1, deny(r, "%s package %s is not in the approved manifest (the operator approves packages in the daemon's configuration, dependencies.approved)", r.Ecosystem, r.Name)
	}
	return Entry{}, -1, deny(r, "version %s is not approved (approved: %s)", r.Version, strings.Join(versions, ", "))
}

// Hosts are the sources' host:port pairs, the only places the daemon
// fetches from: an egress allowlist.
func (m *Manifest) Hosts() []string {
	var out []string
	for _, u := range m.sources {
		hp := hostPort(u)
		if !slices.Contains(out, hp) {
			out = append(out, hp)
		}
	}
	return out
}

// hostPort is u's host and port, the scheme's default when it has none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// equalDigest compares two decoded digests.
func equalDigest(a, b []byte) bool { return len(a) > 0 && bytes.Equal(a, b) }

var errTooLarge = errors.New("too large")
