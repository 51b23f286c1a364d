package mitm

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoadOrCreateCAFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{KeyFile: 0o600, CertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %04o, want %04o", name, got, want)
		}
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca.CertPEM(), onDisk) {
		t.Error("CertPEM differs from ca.pem")
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) {
		t.Error("CertPEM holds a private key")
	}
	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Error("second load made a new CA")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want 2 (temporary files left behind?)", len(entries))
	}
}

func TestLoadOrCreateCAConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	pems := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ca, err := LoadOrCreateCA(dir)
			if err != nil {
				t.Error(err)
				return
			}
			pems[i] = ca.CertPEM()
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if !bytes.Equal(pems[i], pems[0]) {
			t.Fatalf("creator %d ended with another CA", i)
		}
	}
}

func TestLoadOrCreateCARefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"key readable by others", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "mode"},
		{"key is a symlink", func(t *testing.T, dir string) {
			p := filepath.Join(dir, KeyFile)
			if err := os.Rename(p, p+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
		}, "regular file"},
		{"cert of another key", func(t *testing.T, dir string) {
			other := t.TempDir()
			if _, err := LoadOrCreateCA(other); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(filepath.Join(other, CertFile))
			if err := os.WriteFile(filepath.Join(dir, CertFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			_, err := LoadOrCreateCA(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLeaf(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())

	c, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	leaf := c.Leaf
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "api.test" || len(leaf.IPAddresses) != 0 {
		t.Errorf("SANs = %v %v, want only api.test", leaf.DNSNames, leaf.IPAddresses)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: pool}); err == nil {
		t.Error("leaf verifies for other.test")
	}
	if d := leaf.NotAfter.Sub(time.Now()); d > leafValidity || d < leafValidity-time.Minute {
		t.Errorf("leaf valid for %v more, want about %v", d, leafValidity)
	}
	again, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	if again != c {
		t.Error("leaf not cached")
	}

	// Near its end, a cached leaf is replaced.
	ca.now = func() time.Time { return time.Now().Add(leafValidity - leafRenew/2) }
	renewed, err := ca.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	if renewed == c {
		t.Error("leaf near its end not renewed")
	}

	for _, bad := range []string{"", "API.test", "127.0.0.1", "*.api.test", "api.test:443", "a b"} {
		if _, err := ca.Leaf(bad); err == nil {
			t.Errorf("Leaf(%q) succeeded", bad)
		}
	}
}

func TestLeafCacheBound(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range leafCacheSize/8 + 10 {
				if _, err := ca.Leaf("h" + strconv.Itoa(g) + "-" + strconv.Itoa(i) + ".test"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.lru.Len() != leafCacheSize || len(ca.leaves) != leafCacheSize {
		t.Errorf("cache holds %d/%d leaves, want %d", ca.lru.Len(), len(ca.leaves), leafCacheSize)
	}
}
