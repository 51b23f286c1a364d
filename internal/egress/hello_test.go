package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
)

// captureHello returns the first TLS record crypto/tls sends for
// serverName: a real ClientHello. An empty serverName sends none.
func captureHello(t testing.TB, serverName string) []byte {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(a, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	defer func() {
		a.Close()
		b.Close()
		<-done
	}()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatalf("reading record header: %v", err)
	}
	rec := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, rec); err != nil {
		t.Fatalf("reading record: %v", err)
	}
	return append(hdr, rec...)
}

// records splits one handshake message over TLS records of the given
// payload sizes; the last record takes what is left.
func records(msg []byte, sizes ...int) []byte {
	var out []byte
	add := func(p []byte) {
		out = append(out, recordHandshake, 3, 1, byte(len(p)>>8), byte(len(p)))
		out = append(out, p...)
	}
	for _, n := range sizes {
		if n >= len(msg) {
			break
		}
		add(msg[:n])
		msg = msg[n:]
	}
	add(msg)
	return out
}

// ones is n record sizes of one byte.
func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func u16(n int) []byte { return []byte{byte(n >> 8), byte(n)} }

// ext is one extension of a hand-built ClientHello.
func ext(typ int, data []byte) []byte {
	return append(append(u16(typ), u16(len(data))...), data...)
}

// sniExt is a server_name extension with one host_name entry per name.
func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0)
		list = append(list, u16(len(n))...)
		list = append(list, n...)
	}
	return ext(extServerName, append(u16(len(list)), list...))
}

// helloMsg builds a minimal ClientHello handshake message; with no
// extensions at all when exts is nil.
func helloMsg(exts ...[]byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // one cipher suite
	body = append(body, 1, 0)                // null compression
	if exts != nil {
		all := bytes.Join(exts, nil)
		body = append(body, u16(len(all))...)
		body = append(body, all...)
	}
	n := len(body)
	return append([]byte{handshakeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

func TestReadClientHello(t *testing.T) {
	real := captureHello(t, "allowed.test")
	realMsg := real[5:]
	// The message length is kept, so the extensions block overruns it.
	truncatedExt := helloMsg(sniExt("a.test"))
	truncatedExt = truncatedExt[:len(truncatedExt)-1]
	truncatedExt[3]--
	tooBig := []byte{recordHandshake, 3, 1, 0, 4, handshakeClientHello, 0, 0x50, 0}

	tests := []struct {
		name    string
		in      []byte
		oneByte bool
		wantSNI string
		wantErr error
	}{
		{name: "crypto/tls hello", in: real, wantSNI: "allowed.test"},
		{name: "crypto/tls hello read a byte at a time", in: real, oneByte: true, wantSNI: "allowed.test"},
		{name: "split over records", in: records(realMsg, 1, 3, 40, 200), wantSNI: "allowed.test"},
		{name: "one-byte records", in: records(realMsg, ones(len(realMsg))...), oneByte: true, wantSNI: "allowed.test"},
		{name: "crypto/tls without sni", in: captureHello(t, ""), wantErr: errNoSNI},
		{name: "built", in: records(helloMsg(ext(10, []byte{0, 0}), sniExt("a.test"))), wantSNI: "a.test"},
		{name: "no extensions", in: records(helloMsg()), wantErr: errNoSNI},
		{name: "empty extensions", in: records(helloMsg([]byte{})), wantErr: errNoSNI},
		{name: "two host names", in: records(helloMsg(sniExt("a.test", "b.test"))), wantErr: errHelloBad},
		{name: "two sni extensions", in: records(helloMsg(sniExt("a.test"), sniExt("b.test"))), wantErr: errHelloBad},
		{name: "empty host name", in: records(helloMsg(sniExt(""))), wantErr: errHelloBad},
		{name: "other name type only", in: records(helloMsg(ext(extServerName, []byte{0, 4, 7, 0, 1, 'x'}))), wantErr: errNoSNI},
		{name: "encrypted client hello", in: records(helloMsg(sniExt("allowed.test"), ext(extECH, []byte{0}))), wantErr: errECH},
		{name: "plain http", in: []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), wantErr: errNotTLS},
		{name: "connect inside the tunnel", in: []byte("CONNECT evil.test:443 HTTP/1.1\r\n\r\n"), wantErr: errNotTLS},
		{name: "sslv2 framing", in: []byte{0x80, 0x2e, 1, 3, 1}, wantErr: errNotTLS},
		{name: "wrong record version", in: []byte{recordHandshake, 2, 0, 0, 1, 1}, wantErr: errNotTLS},
		{name: "server hello", in: records(append([]byte{2}, helloMsg(sniExt("a.test"))[1:]...)), wantErr: errHelloBad},
		{name: "empty record", in: []byte{recordHandshake, 3, 1, 0, 0}, wantErr: errHelloBad},
		{name: "oversized record", in: []byte{recordHandshake, 3, 1, 0x40, 1}, wantErr: errHelloBad},
		{name: "oversized message", in: tooBig, wantErr: errHelloTooLarge},
		{name: "data after the hello", in: records(append(helloMsg(sniExt("a.test")), 0x14)), wantErr: errHelloBad},
		{name: "truncated record", in: real[:100], wantErr: io.ErrUnexpectedEOF},
		{name: "truncated header", in: real[:3], wantErr: io.ErrUnexpectedEOF},
		{name: "nothing", in: nil, wantErr: io.EOF},
		{name: "extension overruns", in: records(truncatedExt), wantErr: errHelloBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.in)
			if tt.oneByte {
				r = iotest.OneByteReader(r)
			}
			raw, sni, err := readClientHello(r)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("readClientHello() error = %v, want %v", err, tt.wantErr)
			}
			if sni != tt.wantSNI {
				t.Errorf("readClientHello() sni = %q, want %q", sni, tt.wantSNI)
			}
			if err == nil && !bytes.Equal(raw, tt.in) {
				t.Errorf("readClientHello() raw is %d bytes, want the %d read", len(raw), len(tt.in))
			}
		})
	}
}

func TestReadClientHelloLeavesTheRest(t *testing.T) {
	hello := captureHello(t, "allowed.test")
	r := bytes.NewReader(append(append([]byte{}, hello...), "after"...))
	if _, _, err := readClientHello(r); err != nil {
		t.Fatalf("readClientHello() error = %v", err)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "after" {
		t.Errorf("after the hello %q is left, want %q", rest, "after")
	}
}

func TestSNIMatches(t *testing.T) {
	tests := []struct {
		sni  string
		want bool
	}{
		{"allowed.test", true},
		{"ALLOWED.test", true},
		{"allowed.test.", true},
		{"allowed.test..", false},
		{"other.test", false},
		{"allowed.test.evil.test", false},
		{"evilallowed.test", false},
		{"xn--allowed.test", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.sni, func(t *testing.T) {
			if got := sniMatches(tt.sni, "allowed.test"); got != tt.want {
				t.Errorf("sniMatches(%q, allowed.test) = %v, want %v", tt.sni, got, tt.want)
			}
		})
	}
}

func FuzzClientHello(f *testing.F) {
	// Seeds are built, not captured from crypto/tls: a captured hello is
	// random each run, and seeds that differ between the fuzzing
	// processes stall the engine.
	lifelike := helloMsg(
		sniExt("allowed.test"),
		ext(43, []byte{2, 3, 4}), // supported_versions: TLS 1.3
		ext(51, append([]byte{0, 36, 0, 29, 0, 32}, make([]byte, 32)...)), // key_share: X25519
		ext(16, []byte{0, 9, 8, 'h', 't', 't', 'p', '/', '1', '.', '1'}),  // ALPN
	)
	f.Add(records(lifelike))
	f.Add(records(lifelike, 1, 2, 3, 50))
	f.Add(records(helloMsg(sniExt("a.test"))))
	f.Add(records(helloMsg(sniExt("a.test", "b.test"))))
	f.Add(records(helloMsg(ext(extECH, nil))))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, sni, err := readClientHello(bytes.NewReader(data))
		if err != nil {
			return
		}
		if !bytes.HasPrefix(data, raw) || len(raw) > maxHelloRaw {
			t.Fatalf("raw is %d bytes, not a prefix of the input within %d", len(raw), maxHelloRaw)
		}
		if sni == "" {
			t.Fatal("no error and no server name")
		}
	})
}
