package fileapi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve feeds arbitrary client paths to the file API. CleanPath
// accepts only canonical relative paths, and a write through a real FS,
// whose workspace holds links planted toward a sibling directory (as a
// sandbox would plant them), never creates anything outside the root.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"a", "a/b", "./a", "../x", "out/x", "abs/x", "loop/x", "a/../../x", "%2e%2e/x",
		"out", "dangling/x", "a//b/", "/etc/passwd", "a\x00b", "..", "proc/x"} {
		f.Add(s)
	}
	dir := f.TempDir()
	root, outside := filepath.Join(dir, "ws"), filepath.Join(dir, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	for name, target := range map[string]string{"out": "../outside", "abs": outside, "loop": "loop",
		"dangling": "../outside/missing", "proc": "/proc/self/root" + outside} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			f.Fatal(err)
		}
	}
	fsys, err := Open(root, Options{UID: -1, GID: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fsys.Close() })
	f.Fuzz(func(t *testing.T, p string) {
		if c, err := CleanPath(p); err == nil {
			if strings.HasPrefix(c, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") ||
				strings.ContainsRune(c, 0) || (c != "." && filepath.Clean(c) != c) {
				t.Fatalf("CleanPath(%q) = %q, not a canonical relative path", p, c)
			}
			if again, err := CleanPath(c); err != nil || again != c {
				t.Fatalf("CleanPath(%q) = %q, then %q, %v", p, c, again, err)
			}
		}
		fsys.Write(context.Background(), p, strings.NewReader("x"), 0o644, true)
		fsys.Mkdir(context.Background(), p, true)
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Fatalf("writing %q created %s outside the workspace", p, ents[0].Name())
		}
	})
}
