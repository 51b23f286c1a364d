package mitm

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/agentbox/agentbox/internal/policy"
)

// Allowlist is egress.Allowlist: the same unnamed interface type.
type Allowlist = interface {
	Allowed(host string, port int) bool
}

// Secret is one secret a sandbox's policy binds, with its value: field for
// field a manager.BoundSecret, which converts to it.
type Secret struct {
	Name   string
	Value  []byte
	Hosts  []string
	Header string
	Format string
}

// Wrap returns allow extended to intercept the tunnels to the hosts the
// secrets are bound to (it implements egress.Interceptor), and the
// placeholder each secret has in this sandbox.
func Wrap(ca *CA, allow Allowlist, secrets []Secret) (Allowlist, map[string]string, error) {
	bindings := make([]Binding, 0, len(secrets))
	placeholders := make(map[string]string, len(secrets))
	for _, s := range secrets {
		ph, err := NewPlaceholder(s.Name)
		if err != nil {
			return nil, nil, err
		}
		var hosts []policy.HostPattern
		for _, h := range s.Hosts {
			p, err := policy.ParseHostPattern(h)
			if err != nil {
				return nil, nil, fmt.Errorf("secret %s: %w", s.Name, err)
			}
			hosts = append(hosts, p)
		}
		bindings = append(bindings, Binding{Name: s.Name, Placeholder: ph, Value: s.Value, Hosts: hosts, Header: s.Header, Format: s.Format})
		placeholders[s.Name] = ph
	}
	sw, err := NewSwapper(ca, bindings)
	if err != nil {
		return nil, nil, err
	}
	return intercepting{Allowlist: allow, sw: sw}, placeholders, nil
}

// intercepting is an allowlist whose bound hosts' tunnels a Swapper serves.
type intercepting struct {
	Allowlist
	sw *Swapper
}

func (i intercepting) Intercepts(host string, port int) bool { return i.sw.Intercepts(host, port) }

// Intercept serves one tunnel over up, the connection the egress proxy
// dialed to the address it checked.
func (i intercepting) Intercept(ctx context.Context, client net.Conn, host string, port int, up net.Conn, upstreamTLS *tls.Config) (int64, int64, error) {
	dialed := false
	st, err := i.sw.Serve(ctx, client, host, port, func(context.Context) (net.Conn, error) {
		if dialed {
			return nil, fmt.Errorf("%s:%d: the upstream connection is already used", host, port)
		}
		dialed = true
		return up, nil
	}, upstreamTLS)
	return st.BytesUp, st.BytesDown, err
}
