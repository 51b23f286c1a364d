package policy

import (
	"fmt"
	"maps"
	"math"
	"net/textproto"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Ceilings are the most a daemon lets one policy ask for. A zero field
// is no ceiling.
type Ceilings struct {
	// CPUs caps Limits.CPUs.
	CPUs float64 `json:"cpus,omitempty"`
	// Memory caps Limits.Memory.
	Memory ByteSize `json:"memory,omitempty"`
	// Pids caps Limits.Pids.
	Pids int64 `json:"pids,omitempty"`
	// Disk caps Limits.Disk.
	Disk ByteSize `json:"disk,omitempty"`
	// Tmp caps Limits.Tmp.
	Tmp ByteSize `json:"tmp,omitempty"`
	// ExecTimeout caps Limits.ExecTimeout.
	ExecTimeout Duration `json:"exec_timeout,omitempty"`
	// SandboxTimeout caps Limits.SandboxTimeout.
	SandboxTimeout Duration `json:"sandbox_timeout,omitempty"`
	// OutputBytes caps Limits.OutputBytes.
	OutputBytes ByteSize `json:"output_bytes,omitempty"`
	// AllowEntries caps len(Network.Allow): every request through the
	// egress proxy is checked against the whole list.
	AllowEntries int `json:"allow_entries,omitempty"`
	// Secrets caps len(Policy.Secrets).
	Secrets int `json:"secrets,omitempty"`
	// EnvVars caps len(Policy.Env).
	EnvVars int `json:"env_vars,omitempty"`
}

// DefaultCeilings are sized for a small host (2 cores, 24 GiB): one
// sandbox may have all of the CPU but a third of the memory.
func DefaultCeilings() Ceilings {
	return Ceilings{
		CPUs:           2,
		Memory:         8 << 30,
		Pids:           4096,
		Disk:           20 << 30,
		Tmp:            4 << 30,
		ExecTimeout:    Duration(24 * time.Hour),
		SandboxTimeout: Duration(7 * 24 * time.Hour),
		OutputBytes:    1 << 30,
		AllowEntries:   256,
		Secrets:        64,
		EnvVars:        256,
	}
}

// Floors below which a limit cannot work. They match the sandbox spec's
// own checks, so that a policy that passes here is not refused later.
const (
	minCPUs   = 0.01
	minMemory = 16 << 20
	minPids   = 32 // the guest is a Go program and starts a reaper per exec
	minDisk   = 1 << 20
	minTmp    = 1 << 20
)

var (
	secretNameRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,63}$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// proxyEnv are the variables agentbox sets to point tools at the egress
// proxy; they are reserved in either case, as tools read both.
var proxyEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}

// Secret header defaults.
const (
	DefaultSecretHeader = "Authorization"
	DefaultSecretFormat = "{{value}}"
	// SecretPlaceholder is where the secret goes in a Format.
	SecretPlaceholder = "{{value}}"
)

// maxFormatBytes bounds a secret's header value template.
const maxFormatBytes = 1024

// Validate checks p against c. It reports every problem, in document
// order (map keys sorted), each naming its field; the error is of the
// errdefs.ErrInvalid class.
func (p Policy) Validate(c Ceilings) error {
	_, err := p.canonical(c)
	return err
}

// runtimeClassRE is a RuntimeClass's name: a DNS subdomain.
var runtimeClassRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// maxProblems is how many problems one error lists.
const maxProblems = 20

// problemsError makes one error of a list of problems.
func problemsError(problems []string) error {
	if len(problems) > maxProblems {
		more := len(problems) - maxProblems
		problems = append(problems[:maxProblems:maxProblems], fmt.Sprintf("and %d more", more))
	}
	return errdefs.Invalid("%s", strings.Join(problems, "; "))
}

// validator collects the problems of one policy.
type validator struct {
	c        Ceilings
	problems []string
}

func (v *validator) fail(path, format string, args ...any) {
	v.problems = append(v.problems, fieldName(path)+": "+fmt.Sprintf(format, args...))
}

// failValue reports a problem with one value: `network.allow[2] "x": ...`.
func (v *validator) failValue(path, value, reason string) {
	v.problems = append(v.problems, fieldName(path)+" "+quote(value)+": "+reason)
}

// canonical validates p against c and returns its canonical form: a deep
// copy with defaults filled in, host patterns canonical, and empty lists
// and maps nil (so that a policy and its JSON encoding parse equal).
func (p Policy) canonical(c Ceilings) (Policy, error) {
	v := &validator{c: c}
	var out Policy
	var allow []HostPattern
	out.Network, allow = v.network(p.Network)
	out.Secrets = v.secrets(p.Secrets, allow)
	out.Env = v.env(p.Env, p.Secrets)
	out.Limits = v.limits(p.Limits)
	out.WritablePaths = v.writablePaths(p.WritablePaths)
	if p.RuntimeClass != "" && !runtimeClassRE.MatchString(p.RuntimeClass) {
		v.failValue("runtime_class", p.RuntimeClass, "not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253)")
	}
	out.RuntimeClass = p.RuntimeClass
	if len(v.problems) > 0 {
		return Policy{}, problemsError(v.problems)
	}
	return out, nil
}

// network returns the canonical network and, in allowlist mode, its
// parsed patterns.
func (v *validator) network(n Network) (Network, []HostPattern) {
	out := Network{Mode: n.Mode}
	if out.Mode == "" {
		out.Mode = ModeNone
	}
	if out.Mode != ModeNone && out.Mode != ModeAllowlist {
		v.failValue("network.mode", n.Mode, fmt.Sprintf("want %q or %q", ModeNone, ModeAllowlist))
	}
	if max := v.c.AllowEntries; max > 0 && len(n.Allow) > max {
		v.fail("network.allow", "%d entries, over the daemon's ceiling of %d", len(n.Allow), max)
	}
	var patterns []HostPattern
	seen := map[string]int{}
	for i, e := range n.Allow {
		path := index("network.allow", i)
		p, reason := parseHost(e, true)
		if reason != "" {
			v.failValue(path, e, reason)
			continue
		}
		s := p.String()
		if j, dup := seen[s]; dup {
			v.failValue(path, e, fmt.Sprintf("the same as network.allow[%d]", j))
			continue
		}
		seen[s] = i
		out.Allow = append(out.Allow, s)
		patterns = append(patterns, p)
	}
	switch {
	case out.Mode == ModeNone && len(n.Allow) > 0:
		v.fail("network.allow", `network.mode is %q, so these entries would never be used: set network.mode to %q`, ModeNone, ModeAllowlist)
	case out.Mode == ModeAllowlist && len(n.Allow) == 0:
		v.fail("network.allow", `network.mode is %q but the list is empty: add hosts, or set network.mode to %q`, ModeAllowlist, ModeNone)
	}
	if out.Mode != ModeAllowlist {
		patterns = nil
	}
	return out, patterns
}

func (v *validator) secrets(secrets map[string]SecretBinding, allow []HostPattern) map[string]SecretBinding {
	if max := v.c.Secrets; max > 0 && len(secrets) > max {
		v.fail("secrets", "%d secrets, over the daemon's ceiling of %d", len(secrets), max)
	}
	if len(secrets) == 0 {
		return nil
	}
	out := make(map[string]SecretBinding, len(secrets))
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		path := join("secrets", name)
		if reason := SecretNameProblem(name); reason != "" {
			v.fail(path, "%s", reason)
		}
		b := secrets[name]
		out[name] = SecretBinding{
			Hosts:  v.secretHosts(join(path, "hosts"), b.Hosts, allow),
			Header: v.secretHeader(join(path, "header"), b.Header),
			Format: v.secretFormat(join(path, "format"), b.Format),
		}
	}
	return out
}

func (v *validator) secretHosts(path string, hosts []string, allow []HostPattern) []string {
	if len(hosts) == 0 {
		v.fail(path, "bind the secret to at least one host")
		return nil
	}
	var out []string
	seen := map[string]int{}
	for i, h := range hosts {
		ipath := index(path, i)
		p, reason := parseHost(h, true)
		if reason != "" {
			v.failValue(ipath, h, reason)
			continue
		}
		s := p.String()
		if j, dup := seen[s]; dup {
			v.failValue(ipath, h, fmt.Sprintf("the same as %s", index(path, j)))
			continue
		}
		seen[s] = i
		out = append(out, s)
		if !slices.ContainsFunc(allow, p.overlaps) {
			if allow == nil {
				v.failValue(ipath, h, "the network is closed (network.mode is not \"allowlist\"), so the secret could never be sent")
			} else {
				v.failValue(ipath, h, "network.allow does not allow this host and port, so the secret could never be sent there")
			}
		}
	}
	return out
}

// refusedHeaders control the connection or the message framing rather
// than the request: a secret there would be consumed or mangled by the
// proxy, or could smuggle a second request.
var refusedHeaders = []string{"Host", "Connection", "Transfer-Encoding", "Upgrade", "Content-Length", "Te", "Trailer", "Keep-Alive"}

func (v *validator) secretHeader(path, h string) string {
	if h == "" {
		return DefaultSecretHeader
	}
	if !isToken(h) {
		v.failValue(path, h, "not a valid HTTP header name")
		return h
	}
	canon := textproto.CanonicalMIMEHeaderKey(h)
	if slices.Contains(refusedHeaders, canon) || strings.HasPrefix(canon, "Proxy-") {
		v.failValue(path, h, "hop-by-hop, proxy and framing headers cannot carry a secret")
	}
	return canon
}

func (v *validator) secretFormat(path, f string) string {
	if f == "" {
		return DefaultSecretFormat
	}
	switch {
	case len(f) > maxFormatBytes:
		v.failValue(path, f, fmt.Sprintf("longer than %d bytes", maxFormatBytes))
	case strings.Count(f, SecretPlaceholder) != 1:
		v.failValue(path, f, "must contain "+SecretPlaceholder+" exactly once")
	case strings.IndexFunc(f, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0:
		v.failValue(path, f, "must be printable ASCII (it becomes a header value)")
	}
	return f
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2),
// the syntax of header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// reservedEnv says why agentbox keeps an environment variable name for
// itself, or "".
// SecretNameProblem says what is wrong with a secret's name, or returns
// "". The same rule holds for the daemon's secret store and for the
// policies that bind its secrets.
func SecretNameProblem(name string) string {
	if !secretNameRE.MatchString(name) {
		return "secret names are 1 to 64 upper case letters, digits and '_', starting with a letter (they become environment variables)"
	}
	return reservedEnv(name)
}

func reservedEnv(name string) string {
	if strings.HasPrefix(name, "AGENTBOX_") {
		return "names starting with AGENTBOX_ are reserved"
	}
	for _, p := range proxyEnv {
		if strings.EqualFold(name, p) {
			return fmt.Sprintf("agentbox sets %s itself, to point tools at the egress proxy", name)
		}
	}
	return ""
}

func (v *validator) env(env map[string]string, secrets map[string]SecretBinding) map[string]string {
	if max := v.c.EnvVars; max > 0 && len(env) > max {
		v.fail("env", "%d variables, over the daemon's ceiling of %d", len(env), max)
	}
	if len(env) == 0 {
		return nil
	}
	out := make(map[string]string, len(env))
	for _, name := range slices.Sorted(maps.Keys(env)) {
		path := join("env", name)
		value := env[name]
		_, secret := secrets[name]
		switch {
		case !envNameRE.MatchString(name):
			v.fail(path, "variable names are letters, digits and '_', not starting with a digit")
		case reservedEnv(name) != "":
			v.fail(path, "%s", reservedEnv(name))
		case secret:
			v.fail(path, "secrets.%s sets this variable (to the secret's placeholder)", name)
		case strings.IndexByte(value, 0) >= 0:
			v.fail(path, "values cannot contain NUL bytes")
		}
		out[name] = value
	}
	return out
}

func (v *validator) limits(l Limits) Limits {
	c := v.c
	switch {
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		v.fail("limits.cpus", "not a number")
	case l.CPUs < 0:
		v.fail("limits.cpus", "cannot be negative")
	case l.CPUs > 0 && l.CPUs < minCPUs:
		v.problems = append(v.problems, fmt.Sprintf("limits.cpus %g is under the minimum of %g", l.CPUs, minCPUs))
	case c.CPUs > 0 && l.CPUs > c.CPUs:
		v.problems = append(v.problems, fmt.Sprintf("limits.cpus %g is over the daemon's ceiling of %g", l.CPUs, c.CPUs))
	}
	v.byteLimit("limits.memory", l.Memory, minMemory, c.Memory)
	switch {
	case l.Pids < 0:
		v.fail("limits.pids", "cannot be negative")
	case l.Pids > 0 && l.Pids < minPids:
		v.problems = append(v.problems, fmt.Sprintf("limits.pids %d is under the minimum of %d (the guest and its per-exec reapers need threads too)", l.Pids, minPids))
	case c.Pids > 0 && l.Pids > c.Pids:
		v.problems = append(v.problems, fmt.Sprintf("limits.pids %d is over the daemon's ceiling of %d", l.Pids, c.Pids))
	}
	v.byteLimit("limits.disk", l.Disk, minDisk, c.Disk)
	v.byteLimit("limits.tmp", l.Tmp, minTmp, c.Tmp)
	if l.Tmp > 0 && l.Memory > 0 && l.Tmp > l.Memory {
		// A tmpfs larger than the memory limit could only ever end in the
		// OOM killer.
		v.problems = append(v.problems, fmt.Sprintf("limits.tmp %s is over limits.memory %s (/tmp is held in memory)", l.Tmp, l.Memory))
	}
	v.durationLimit("limits.exec_timeout", l.ExecTimeout, c.ExecTimeout)
	v.durationLimit("limits.sandbox_timeout", l.SandboxTimeout, c.SandboxTimeout)
	v.byteLimit("limits.output_bytes", l.OutputBytes, 0, c.OutputBytes)
	return l
}

func (v *validator) byteLimit(path string, b, floor, ceiling ByteSize) {
	switch {
	case b < 0:
		v.fail(path, "cannot be negative")
	case b > 0 && b < floor:
		v.problems = append(v.problems, fmt.Sprintf("%s %s is under the minimum of %s", path, b, floor))
	case ceiling > 0 && b > ceiling:
		v.problems = append(v.problems, fmt.Sprintf("%s %s is over the daemon's ceiling of %s", path, b, ceiling))
	}
}

func (v *validator) durationLimit(path string, d, ceiling Duration) {
	switch {
	case d < 0:
		v.fail(path, "cannot be negative")
	case ceiling > 0 && d > ceiling:
		v.problems = append(v.problems, fmt.Sprintf("%s %s is over the daemon's ceiling of %s", path, d, ceiling))
	}
}

func (v *validator) writablePaths(paths []string) []string {
	var out []string
	seen := map[string]int{}
	for i, p := range paths {
		path := index("writable_paths", i)
		if reason := checkWritablePath(p); reason != "" {
			v.failValue(path, p, reason)
			continue
		}
		if j, dup := seen[p]; dup {
			v.failValue(path, p, fmt.Sprintf("the same as writable_paths[%d]", j))
			continue
		}
		seen[p] = i
		out = append(out, p)
	}
	return out
}
