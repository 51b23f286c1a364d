package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

const isNumberIntegrity = "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng=="

func TestEgressAndDependencies(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agentbox.yaml")
	os.WriteFile(file, []byte(`data_dir: /srv/ab
egress:
  resolve_allow:
    - host: registry.npmjs.org
      addresses: ["203.0.113.0/24", "2001:db8::/48"]
dependencies:
  approved:
    - {ecosystem: npm, name: is-number, version: 7.0.0, integrity: "`+isNumberIntegrity+`", source: "https://registry.npmjs.org"}
`), 0o600)
	c, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	al, err := c.ResolveAllowances()
	if err != nil || len(al) != 1 || al[0].Host != "registry.npmjs.org" || len(al[0].Prefixes) != 2 {
		t.Errorf("ResolveAllowances() = %+v, %v", al, err)
	}
	m, err := c.Manifest()
	if err != nil || len(m.Entries()) != 1 || m.Hosts()[0] != "registry.npmjs.org:443" {
		t.Errorf("Manifest() = %+v, %v", m, err)
	}

	for name, tt := range map[string]struct {
		yaml, want string
	}{
		"wildcard host":       {"egress: {resolve_allow: [{host: '*', addresses: [10.0.0.1]}]}", "egress.resolve_allow[0]: host \"*\": a wildcard"},
		"suffix wildcard":     {"egress: {resolve_allow: [{host: '*.npmjs.org', addresses: [10.0.0.1]}]}", "wildcard"},
		"everything":          {"egress: {resolve_allow: [{host: a.example, addresses: [0.0.0.0/0]}]}", "covers too much"},
		"every ipv6":          {"egress: {resolve_allow: [{host: a.example, addresses: ['::/0']}]}", "covers too much"},
		"metadata":            {"egress: {resolve_allow: [{host: a.example, addresses: [169.254.169.254]}]}", "metadata"},
		"duplicate host":      {"egress: {resolve_allow: [{host: a.example, addresses: [10.0.0.1]}, {host: a.example, addresses: [10.0.0.2]}]}", "egress.resolve_allow[1]: host a.example is listed already"},
		"no addresses":        {"egress: {resolve_allow: [{host: a.example}]}", "no addresses"},
		"unknown key":         {"egress: {resolve_allow: [{host: a.example, addresses: [10.0.0.1], ports: [443]}]}", "ports"},
		"unpinned dependency": {"dependencies: {approved: [{ecosystem: npm, name: is-number, version: ^7.0.0, integrity: '" + isNumberIntegrity + "', source: 'https://registry.npmjs.org'}]}", "dependencies.approved[0] (is-number): version \"^7.0.0\" is not pinned"},
		"bad digest":          {"dependencies: {approved: [{ecosystem: npm, name: is-number, version: 7.0.0, integrity: 'sha1-abc', source: 'https://registry.npmjs.org'}]}", "integrity must be sha512"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "c.yaml")
			os.WriteFile(file, []byte(tt.yaml+"\n"), 0o600)
			c, err := Load(file)
			if err == nil {
				err = c.Validate()
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want invalid saying %q", err, tt.want)
			}
		})
	}
}

// TestPolicyCannotCarryResolveAllowance: the allowance is the operator's
// alone. A sandbox's policy document that tries to carry one, anywhere,
// is refused, not read with the allowance dropped.
func TestPolicyCannotCarryResolveAllowance(t *testing.T) {
	for _, doc := range []string{
		`{"network": {"mode": "allowlist", "allow": ["registry.npmjs.org"], "resolve_allow": [{"host": "registry.npmjs.org", "addresses": ["203.0.113.0/24"]}]}}`,
		`{"network": {"mode": "allowlist", "allow": ["registry.npmjs.org"]}, "egress": {"resolve_allow": [{"host": "registry.npmjs.org", "addresses": ["203.0.113.0/24"]}]}}`,
		`{"resolve_allow": [{"host": "registry.npmjs.org", "addresses": ["203.0.113.0/24"]}]}`,
		"dependencies:\n  approved: [{ecosystem: npm, name: is-number, version: 7.0.0}]\n",
	} {
		if _, err := policy.Parse([]byte(doc)); !errors.Is(err, errdefs.ErrInvalid) || !(strings.Contains(err.Error(), "resolve_allow") || strings.Contains(err.Error(), "egress") || strings.Contains(err.Error(), "dependencies")) {
			t.Errorf("policy.Parse(%s) = %v, want it refused naming the field", doc, err)
		}
	}
}
