package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Secrets is the daemon's secret store (package secrets).
type Secrets interface {
	Set(ctx context.Context, name string, value []byte) error
	// Reveal returns a value, for the egress proxy alone.
	Reveal(ctx context.Context, name string) ([]byte, error)
	List(ctx context.Context) ([]store.SealedSecret, error)
	Delete(ctx context.Context, name string) error
	// Values returns every value, for checks of what leaves a workspace.
	Values(ctx context.Context) ([][]byte, error)
}

func (m *Manager) secretStore() (Secrets, error) {
	if m.cfg.Secrets == nil {
		return nil, fmt.Errorf("this daemon has no secret store: %w", errdefs.ErrUnavailable)
	}
	return m.cfg.Secrets, nil
}

// SetSecret stores a secret. The event records the name, never the value.
func (m *Manager) SetSecret(ctx context.Context, name string, value []byte) error {
	s, err := m.secretStore()
	if err != nil {
		return err
	}
	if err := s.Set(ctx, name, value); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "secret.set"}, map[string]any{"name": name, "bytes": len(value)})
	return nil
}

// ListSecrets returns the secrets' names and times.
func (m *Manager) ListSecrets(ctx context.Context) ([]store.SealedSecret, error) {
	s, err := m.secretStore()
	if err != nil {
		return nil, err
	}
	return s.List(ctx)
}

// RemoveSecret deletes a secret.
func (m *Manager) RemoveSecret(ctx context.Context, name string) error {
	s, err := m.secretStore()
	if err != nil {
		return err
	}
	if err := s.Delete(ctx, name); err != nil {
		return err
	}
	m.event(ctx, store.Event{Type: "secret.removed"}, map[string]any{"name": name})
	return nil
}

// BoundSecret is a secret a sandbox's policy binds, with its value; field
// for field an mitm.Secret.
type BoundSecret struct {
	Name   string
	Value  []byte
	Hosts  []string
	Header string
	Format string
}

// caBundleName is the CA bundle's name in a sandbox's run directory.
const caBundleName = "ca-bundle.pem"

// caBundlePath is where the sandbox sees it.
const caBundlePath = "/run/agentbox/" + caBundleName

// caEnv points the common TLS clients at the bundle: OpenSSL and Go,
// curl, git, Python requests, Node.
var caEnv = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// bindSecrets reveals the secrets spec's policy binds and extends allow
// to swap them in; it returns the allowlist for the egress socket and the
// placeholders the sandbox gets instead of the values.
func (m *Manager) bindSecrets(ctx context.Context, spec sandbox.Spec, allow Allowlist) (Allowlist, map[string]string, error) {
	p := spec.Policy
	if p == nil || len(p.Secrets) == 0 {
		return allow, nil, nil
	}
	if m.cfg.Secrets == nil || m.cfg.Intercept == nil {
		return nil, nil, fmt.Errorf("policy secrets: this daemon cannot swap secrets in: %w", errdefs.ErrUnavailable)
	}
	var bound []BoundSecret
	for _, name := range slices.Sorted(maps.Keys(p.Secrets)) {
		v, err := m.cfg.Secrets.Reveal(ctx, name)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil, errdefs.Invalid("policy secrets.%s: no secret %s is stored (agentbox secret set %s)", name, name, name)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("policy secrets.%s: %w", name, err)
		}
		b := p.Secrets[name]
		bound = append(bound, BoundSecret{Name: name, Value: v, Hosts: b.Hosts, Header: b.Header, Format: b.Format})
	}
	return m.cfg.Intercept(allow, bound)
}
