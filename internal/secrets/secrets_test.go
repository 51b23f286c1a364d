package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
)

func openStore(t *testing.T, dir string) *sqlstore.Store {
	t.Helper()
	st, err := sqlstore.Open(t.Context(), filepath.Join(dir, "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSealAndOpen(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	b, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	value := []byte("ghp_canary0123456789abcdefghijklmnopqrstu")
	if err := b.Set(ctx, "GITHUB_TOKEN", value); err != nil {
		t.Fatal(err)
	}
	got, err := b.Reveal(ctx, "GITHUB_TOKEN")
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Reveal = %q, %v", got, err)
	}
	// The key file is the owner's only; the database never holds the
	// value (the oracle reads the files, WAL included, not the API).
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi.Mode(), err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "agentbox.db*"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		if bytes.Contains(raw, value) {
			t.Errorf("%s holds the secret in clear", f)
		}
	}
	// List names it without a value; Values finds it.
	list, _ := b.List(ctx)
	if len(list) != 1 || list[0].Name != "GITHUB_TOKEN" || list[0].Sealed != nil {
		t.Errorf("List = %+v", list)
	}
	if vals, err := b.Values(ctx); err != nil || len(vals) != 1 || !bytes.Equal(vals[0], value) {
		t.Errorf("Values = %q, %v", vals, err)
	}
	// A second Box on the same data dir (the daemon restarted) opens it.
	b2, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b2.Reveal(ctx, "GITHUB_TOKEN"); err != nil || !bytes.Equal(got, value) {
		t.Errorf("Reveal after reopening = %q, %v", got, err)
	}
	if err := b.Delete(ctx, "GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reveal(ctx, "GITHUB_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Reveal after Delete: %v", err)
	}
}

// A sealed value moved to another name, changed, or opened with another
// data dir's key does not open.
func TestTamperingIsDetected(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	b, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, n := range []string{"A_TOKEN", "B_TOKEN"} {
		if err := b.Set(ctx, n, []byte("value-of-"+n)); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := st.GetSecret(ctx, "A_TOKEN")
	moved := a
	moved.Name = "B_TOKEN"
	if err := st.PutSecret(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Reveal(ctx, "B_TOKEN"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a value moved to another name opened: %q, %v", v, err)
	}
	flipped := a
	flipped.Sealed = append([]byte(nil), a.Sealed...)
	flipped.Sealed[0] ^= 1
	st.PutSecret(ctx, flipped)
	if v, err := b.Reveal(ctx, "A_TOKEN"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a changed value opened: %q, %v", v, err)
	}
	other, err := Open(t.TempDir(), st)
	if err != nil {
		t.Fatal(err)
	}
	b.Set(ctx, "A_TOKEN", []byte("fresh"))
	if v, err := other.Reveal(ctx, "A_TOKEN"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("another key opened the value: %q, %v", v, err)
	}
	if vals, _ := other.Values(ctx); len(vals) != 0 {
		t.Errorf("Values with another key = %q", vals)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	b, err := Open(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for name, tc := range map[string]struct {
		name  string
		value string
	}{
		"lower case name":   {"token", "x"},
		"reserved name":     {"AGENTBOX_TOKEN", "x"},
		"proxy name":        {"HTTPS_PROXY", "x"},
		"empty value":       {"TOKEN", ""},
		"line break":        {"TOKEN", "a\r\nX-Injected: 1"},
		"NUL":               {"TOKEN", "a\x00b"},
		"over the size cap": {"TOKEN", string(make([]byte, MaxValueBytes+1))},
	} {
		t.Run(name, func(t *testing.T) {
			if err := b.Set(ctx, tc.name, []byte(tc.value)); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Set(%q) = %v, want invalid", tc.name, err)
			}
		})
	}
	if list, _ := b.List(ctx); len(list) != 0 {
		t.Errorf("refused values were stored: %+v", list)
	}
}

func TestKeyFile(t *testing.T) {
	// Many daemons starting at once on one data dir end with one key.
	dir := t.TempDir()
	st := openStore(t, dir)
	var wg sync.WaitGroup
	boxes := make([]*Box, 8)
	for i := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			boxes[i], _ = Open(dir, st)
		}()
	}
	wg.Wait()
	if err := boxes[0].Set(t.Context(), "SHARED", []byte("one key")); err != nil {
		t.Fatal(err)
	}
	for i, b := range boxes {
		if b == nil {
			t.Fatalf("box %d did not open", i)
		}
		if v, err := b.Reveal(t.Context(), "SHARED"); err != nil || string(v) != "one key" {
			t.Errorf("box %d: %q, %v", i, v, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "."+KeyFile+".tmp-*"))
	if d := cmp.Diff([]string(nil), left); d != "" {
		t.Errorf("temporary key files left (-want +got):\n%s", d)
	}
	// A key others can read, or of the wrong size, is refused.
	for name, fix := range map[string]func(p string) error{
		"readable by others": func(p string) error { return os.Chmod(p, 0o644) },
		"truncated":          func(p string) error { return os.Truncate(p, 16) },
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			if _, err := Open(d, st); err != nil {
				t.Fatal(err)
			}
			if err := fix(filepath.Join(d, KeyFile)); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(d, st); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Open with a key file %s: %v", name, err)
			}
		})
	}
}
