package fileapi

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// env is a workspace with canaries around it:
//
//	base/ws/             the workspace the FS serves
//	base/outside/canary  a file a hostile path would like to reach
//	base/ws-evil/canary  a sibling sharing the workspace's name as prefix
type env struct {
	base, ws, outside, evil string
	secret                  string // the canaries' content, also a grep pattern
	fs                      *FS
	before                  map[string]string
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{
		base:    base,
		ws:      filepath.Join(base, "ws"),
		outside: filepath.Join(base, "outside"),
		evil:    filepath.Join(base, "ws-evil"),
		secret:  "canary-" + randomHex(t),
	}
	for _, d := range []string{e.ws, e.outside, e.evil} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{e.outside, e.evil} {
		if err := os.WriteFile(filepath.Join(d, "canary"), []byte(e.secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Open(e.ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	e.fs = f
	e.before = e.snapshot(t)
	return e
}

func randomHex(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// snapshot records everything under base except the workspace: type, mode,
// content and link target, so any write, chmod, chown-free rename or new
// file outside the workspace shows up as a diff.
func (e *env) snapshot(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(e.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == e.ws {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		got[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkOutside fails the test if anything outside the workspace changed.
func (e *env) checkOutside(t *testing.T) {
	t.Helper()
	if diff := cmp.Diff(e.before, e.snapshot(t)); diff != "" {
		t.Fatalf("files outside the workspace changed (-before +after):\n%s", diff)
	}
}

// path returns the host path of a workspace-relative name.
func (e *env) path(rel string) string { return filepath.Join(e.ws, rel) }

func (e *env) writeFile(t *testing.T, rel, content string) {
	t.Helper()
	p := e.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) symlink(t *testing.T, target, rel string) {
	t.Helper()
	if err := os.Symlink(target, e.path(rel)); err != nil {
		t.Fatal(err)
	}
}

// within runs fn and fails the test if it has not returned after d. A
// blocked fn leaks its goroutine, which is the lesser evil in a failing test.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}
