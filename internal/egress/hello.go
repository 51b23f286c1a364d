package egress

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Just enough of TLS (RFC 8446 sections 4.1.2 and 5.1, RFC 6066 section
// 3) to read the server name a client asks for. Nothing here decrypts or
// answers; the bytes read are forwarded unchanged.
const (
	recordHandshake      = 22
	handshakeClientHello = 1
	extServerName        = 0
	extECH               = 0xfe0d // encrypted_client_hello
	maxRecordPayload     = 1 << 14

	// maxHelloMsg caps the ClientHello message. Real ones, post-quantum key
	// shares included, are a few KiB.
	maxHelloMsg = 16 << 10
	// maxHelloRaw caps the bytes read for it, record headers included, so
	// that one-byte records cannot stretch the cap sixfold.
	maxHelloRaw = 2 * maxHelloMsg
)

var (
	errNotTLS        = fmt.Errorf("not tls: %w", errdefs.ErrPolicyDenied)
	errNoSNI         = fmt.Errorf("no server name: %w", errdefs.ErrPolicyDenied)
	errECH           = fmt.Errorf("encrypted client hello: %w", errdefs.ErrPolicyDenied)
	errHelloTooLarge = fmt.Errorf("client hello: %w", errdefs.ErrTooLarge)
	errHelloBad      = errdefs.Invalid("malformed client hello")
)

// readClientHello reads one TLS ClientHello from r, however it is split
// across records and reads, and returns the bytes read, to be forwarded,
// and the server name. A hello with no server name, more than one, or an
// encrypted one (ECH, whose inner name the proxy cannot check) is an
// error.
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var msg []byte
	need := -1 // length of the whole handshake message, once known
	var hdr [5]byte
	for {
		// The first byte alone tells plain text from TLS, without waiting
		// for more from a client that sent little.
		if _, err := io.ReadFull(r, hdr[:1]); err != nil {
			return nil, "", err
		}
		if hdr[0] != recordHandshake {
			return nil, "", errNotTLS
		}
		if _, err := io.ReadFull(r, hdr[1:]); err != nil {
			return nil, "", err
		}
		if hdr[1] != 3 {
			return nil, "", errNotTLS
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxRecordPayload {
			return nil, "", errHelloBad
		}
		if len(raw)+len(hdr)+n > maxHelloRaw {
			return nil, "", errHelloTooLarge
		}
		raw = append(raw, hdr[:]...)
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return nil, "", err
		}
		msg = append(msg, raw[start:]...)
		if need < 0 && len(msg) >= 4 {
			if msg[0] != handshakeClientHello {
				return nil, "", errHelloBad
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > maxHelloMsg {
				return nil, "", errHelloTooLarge
			}
		}
		if need >= 0 && len(msg) >= need {
			// Nothing may follow the ClientHello in its flight; bytes that
			// did would reach the server unchecked.
			if len(msg) > need {
				return nil, "", errHelloBad
			}
			sni, err := parseClientHello(msg[4:])
			if err != nil {
				return nil, "", err
			}
			return raw, sni, nil
		}
	}
}

// parseClientHello returns the host_name of the server_name extension of
// a ClientHello body.
func parseClientHello(b []byte) (string, error) {
	s := &cursor{b: b}
	s.skip(2 + 32) // legacy_version, random
	if sid := s.vec8(); len(sid) > 32 {
		return "", errHelloBad
	}
	if suites := s.vec16(); len(suites) == 0 || len(suites)%2 != 0 {
		return "", errHelloBad
	}
	if comp := s.vec8(); len(comp) == 0 {
		return "", errHelloBad
	}
	if s.bad {
		return "", errHelloBad
	}
	if len(s.b) == 0 {
		return "", errNoSNI // no extensions at all
	}
	exts := &cursor{b: s.vec16()}
	if s.bad || len(s.b) != 0 {
		return "", errHelloBad
	}
	seen := map[int]bool{}
	sni := ""
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec16()
		if exts.bad || seen[typ] {
			return "", errHelloBad
		}
		seen[typ] = true
		switch typ {
		case extECH:
			return "", errECH
		case extServerName:
			name, err := parseServerName(data)
			if err != nil {
				return "", err
			}
			sni = name
		}
	}
	if sni == "" {
		return "", errNoSNI
	}
	return sni, nil
}

// parseServerName reads a ServerNameList and returns its one host_name.
func parseServerName(b []byte) (string, error) {
	s := &cursor{b: b}
	list := &cursor{b: s.vec16()}
	if s.bad || len(s.b) != 0 || len(list.b) == 0 {
		return "", errHelloBad
	}
	name := ""
	for len(list.b) > 0 {
		typ := list.u8()
		v := list.vec16()
		if list.bad {
			return "", errHelloBad
		}
		if typ != 0 {
			continue // not host_name: RFC 6066 defines no other type
		}
		if name != "" || len(v) == 0 {
			return "", errHelloBad
		}
		name = string(v)
	}
	if name == "" {
		return "", errNoSNI
	}
	return name, nil
}

// sniMatches reports whether a server name is the canonical host that was
// allowed. It is deliberately stricter than canonicalHost: the server sees
// the name as sent, so only case and one trailing dot may differ.
func sniMatches(sni, host string) bool {
	return strings.TrimSuffix(strings.ToLower(sni), ".") == host
}

// helloReason turns a readClientHello error into a decision reason.
func helloReason(err error) string {
	switch {
	case errors.Is(err, errNotTLS):
		return "client hello: not tls"
	case errors.Is(err, errNoSNI):
		return "client hello: no sni"
	case errors.Is(err, errECH):
		return "client hello: encrypted client hello"
	case errors.Is(err, errHelloTooLarge):
		return "client hello: too large"
	case errors.Is(err, errHelloBad):
		return "client hello: malformed"
	case isTimeout(err):
		return "client hello: timeout"
	}
	return "client hello: connection closed"
}

// cursor reads big-endian TLS fields; a short read sets bad and yields
// zeros, so callers check once after a run of reads.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) take(n int) []byte {
	if c.bad || n > len(c.b) {
		c.bad = true
		return nil
	}
	v := c.b[:n]
	c.b = c.b[n:]
	return v
}

func (c *cursor) skip(n int) { c.take(n) }

func (c *cursor) u8() int {
	v := c.take(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (c *cursor) u16() int {
	v := c.take(2)
	if v == nil {
		return 0
	}
	return int(v[0])<<8 | int(v[1])
}

func (c *cursor) vec8() []byte  { return c.take(c.u8()) }
func (c *cursor) vec16() []byte { return c.take(c.u16()) }
