// Package mitm is the credential swap of the egress proxy: for the hosts a
// secret is bound to, it terminates the sandbox's TLS with a per-daemon CA
// that the sandbox trusts, puts the real value in the bound header of
// requests to the bound host and port (the sandbox only ever holds a
// placeholder), and writes the placeholder back over the real value in
// everything that comes back.
//
// The package is a library: the egress proxy decides which tunnels to hand
// to a Swapper (Intercepts) and gives it a dialer for the address it has
// already checked; everything else stays a plain tunnel.
package mitm

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/atomicfile"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
)

// Files of the CA in its directory.
const (
	// KeyFile holds the CA's private key (PKCS #8, PEM), mode 0600.
	KeyFile = "ca.key"
	// CertFile holds the CA's self-signed certificate (PEM), mode 0644:
	// it is what sandboxes are made to trust.
	CertFile = "ca.pem"
)

const (
	// caValidity is the CA certificate's life. The key is the daemon's;
	// rotating it means deleting both files.
	caValidity = 10 * 365 * 24 * time.Hour
	// leafValidity is kept short: a leaf that escapes is worth little.
	leafValidity = 24 * time.Hour
	// leafRenew is how long before its end a cached leaf is replaced, so
	// that no handshake is served a leaf about to expire.
	leafRenew = time.Hour
	// clockSkew backdates certificates for clients whose clock lags.
	clockSkew = time.Hour
	// leafCacheSize bounds the leaf cache; the least recently used leaf
	// goes first.
	leafCacheSize = 1024
	// maxFileBytes bounds what is read from the CA files.
	maxFileBytes = 64 << 10
)

// CA is the daemon's interception CA. It is safe for concurrent use.
type CA struct {
	// key signs leaves; it never leaves the process.
	key *ecdsa.PrivateKey
	// cert is the parsed CA certificate.
	cert *x509.Certificate
	// certPEM is the file's content, handed to sandboxes.
	certPEM []byte
	// now is the clock, replaced in tests.
	now func() time.Time

	// mu guards leaves and lru.
	mu sync.Mutex
	// leaves maps a host to its element in lru.
	leaves map[string]*list.Element
	// lru holds *leafEntry, most recently used first.
	lru *list.List
}

// leafEntry is one cached leaf.
type leafEntry struct {
	host string
	cert *tls.Certificate
}

// LoadOrCreateCA loads the CA kept in dir, making it on first use. Files
// are written whole and synced under temporary names, then linked into
// place, so that two daemons starting on one dir end with one CA and a
// crash never leaves half a file. A key file that is not a regular file
// readable by its owner only is refused: it may have been read.
func LoadOrCreateCA(dir string) (*CA, error) {
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	// The directory is the daemon's alone: made so on first use.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca directory: %w", err)
	}
	key, err := loadOrCreate(keyPath, 0o600, func() ([]byte, error) { return newKeyPEM() })
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	priv, err := parseKey(key)
	if err != nil {
		return nil, fmt.Errorf("ca key %s: %w", keyPath, err)
	}
	// The certificate is made from whichever key won; whichever certificate
	// is linked first is the one everybody reads.
	certPEM, err := loadOrCreate(certPath, 0o644, func() ([]byte, error) { return newCertPEM(priv) })
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := parseCert(certPEM, priv)
	if err != nil {
		return nil, fmt.Errorf("ca certificate %s: %w", certPath, err)
	}
	return &CA{
		key:     priv,
		cert:    cert,
		certPEM: certPEM,
		now:     time.Now,
		leaves:  make(map[string]*list.Element),
		lru:     list.New(),
	}, nil
}

// CertPEM returns the CA certificate in PEM: what a sandbox is made to
// trust.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Leaf returns a certificate for exactly host, signed by the CA, valid
// for a day. host must be canonical (policy.CanonicalHost) and not an
// address. Leaves are cached per host.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	if c, err := policy.CanonicalHost(host); err != nil || c != host {
		return nil, errdefs.Invalid("leaf for %q: not a canonical host name", host)
	}
	now := ca.now()
	ca.mu.Lock()
	if e, ok := ca.leaves[host]; ok {
		le := e.Value.(*leafEntry)
		if now.Add(leafRenew).Before(le.cert.Leaf.NotAfter) {
			ca.lru.MoveToFront(e)
			ca.mu.Unlock()
			return le.cert, nil
		}
	}
	ca.mu.Unlock()

	// Signing happens outside the lock; two callers racing for one host
	// both sign, and the later insert wins. Both leaves are valid.
	cert, err := ca.newLeaf(host, now)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", host, err)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e, ok := ca.leaves[host]; ok {
		e.Value = &leafEntry{host: host, cert: cert}
		ca.lru.MoveToFront(e)
	} else {
		ca.leaves[host] = ca.lru.PushFront(&leafEntry{host: host, cert: cert})
	}
	for ca.lru.Len() > leafCacheSize {
		last := ca.lru.Back()
		ca.lru.Remove(last)
		delete(ca.leaves, last.Value.(*leafEntry).host)
	}
	return cert, nil
}

func (ca *CA) newLeaf(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(leafValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// loadOrCreate reads p, or makes it with make and links it into place.
// Losing the race to another creator is not an error: the winner's file
// is read.
func loadOrCreate(p string, mode fs.FileMode, make func() ([]byte, error)) ([]byte, error) {
	for range 2 {
		b, err := readFile(p, mode)
		if !errors.Is(err, fs.ErrNotExist) {
			return b, err
		}
		content, err := make()
		if err != nil {
			return nil, err
		}
		if err := atomicfile.WriteNew(p, mode, content); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
	}
	return readFile(p, mode)
}

// readFile reads p, refusing anything but a regular file whose mode gives
// no more than mode allows.
func readFile(p string, mode fs.FileMode) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&^mode != 0 || fi.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s must be a regular file with mode %04o or stricter (it is %s, %d bytes): %w", p, mode, fi.Mode(), fi.Size(), errdefs.ErrInvalid)
	}
	return os.ReadFile(p)
}

func newKeyPEM() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" || len(rest) != 0 {
		return nil, errdefs.Invalid("not one PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errdefs.Invalid("parsing key: %v", err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, errdefs.Invalid("not an ECDSA P-256 key")
	}
	return ec, nil
}

func newCertPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "agentbox egress CA " + serial.Text(16)[:8], Organization: []string{"agentbox"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// parseCert parses the CA certificate and checks that it is a CA for key,
// still valid.
func parseCert(b []byte, key *ecdsa.PrivateKey) (*x509.Certificate, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
		return nil, errdefs.Invalid("not one PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, errdefs.Invalid("parsing certificate: %v", err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errdefs.Invalid("certificate does not match %s", KeyFile)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errdefs.Invalid("certificate is not a CA")
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, errdefs.Invalid("certificate expired at %s; delete %s and %s to make a new CA", cert.NotAfter.Format(time.RFC3339), KeyFile, CertFile)
	}
	return cert, nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
