// Package policy is the isolation policy a caller attaches to a sandbox:
// which hosts it may reach, which secrets it may use and where, its
// environment, its resource limits and which workspace paths it may
// change.
//
// A policy is read once, by Parse, into a canonical form (host names
// lower case and in their ASCII form, defaults filled in, sizes and
// durations as numbers), so that everything downstream (the manager, the
// egress proxy) compares canonical values and never re-interprets the
// caller's text. Validate checks a policy against the daemon's ceilings;
// every problem names the field the way it is written in the document
// ("network.allow[2]", "limits.memory").
package policy

import (
	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// MaxDocumentBytes is the largest policy document Parse reads.
const MaxDocumentBytes = 1 << 20

// Network modes.
const (
	// ModeNone gives the sandbox no network at all (the default).
	ModeNone = "none"
	// ModeAllowlist lets the sandbox reach the hosts in Network.Allow
	// through the egress proxy, and nothing else.
	ModeAllowlist = "allowlist"
)

// Policy is one sandbox's policy document. Its fields are those of the
// API's document (apitypes.Policy), so that what a request carries, what
// the OpenAPI document says and what Parse reads cannot differ; this type
// adds the validation and the canonical form.
type Policy apitypes.Policy

// Network is the network part of a policy.
type Network = apitypes.PolicyNetwork

// SecretBinding says where one secret may be sent.
type SecretBinding = apitypes.PolicySecretBinding

// Limits are a sandbox's resource limits. Zero means not set.
type Limits = apitypes.PolicyLimits

// Parse reads a policy document, JSON or YAML, strictly: unknown fields,
// duplicate keys, a second document, trailing data and documents over
// MaxDocumentBytes are errors. It validates the policy without ceilings
// (see Validate) and returns it in canonical form.
//
// Callers holding a policy inside a larger JSON request should pass its
// raw bytes here rather than json.Unmarshal it: that would skip both the
// strictness and the canonical form.
func Parse(data []byte) (Policy, error) {
	j, err := toJSON(data)
	if err != nil {
		return Policy{}, errdefs.Invalid("reading policy: %v", err)
	}
	var d decoder
	var p Policy
	d.policy(j, &p)
	if len(d.problems) > 0 {
		return Policy{}, problemsError(d.problems)
	}
	return p.canonical(Ceilings{})
}

// Allowed reports whether the policy lets the sandbox reach host on
// port. host is canonicalised first (see CanonicalHost); a host that does
// not canonicalise, an IP address among them, is not allowed.
func (p Policy) Allowed(host string, port int) bool {
	if p.Network.Mode != ModeAllowlist {
		return false
	}
	canon, reason := parseHost(host, false)
	if reason != "" {
		return false
	}
	for _, e := range p.Network.Allow {
		if pat, reason := parseHost(e, true); reason == "" && pat.Matches(canon.Host, port) {
			return true
		}
	}
	return false
}

// PathWritable reports whether the sandbox may change rel, a
// slash-separated path relative to the workspace. With no WritablePaths
// everything in the workspace is writable; a path that is absolute or
// leaves the workspace never is.
func (p Policy) PathWritable(rel string) bool {
	name, ok := cleanRelative(rel)
	if !ok {
		return false
	}
	if len(p.WritablePaths) == 0 {
		return true
	}
	for _, pat := range p.WritablePaths {
		if checkWritablePath(pat) == "" && matchPath(pat, name) {
			return true
		}
	}
	return false
}
