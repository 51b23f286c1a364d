package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteBranchUpperHostile: a fork's upper layer is a copy of what a
// sandbox wrote. Symlinks planted on the way to .git/refs/heads or as
// .git/HEAD must never lead the host's write outside the layer.
func TestWriteBranchUpperHostile(t *testing.T) {
	const commit = "0123456789012345678901234567890123456789"
	t.Run("refs dir is a symlink out", func(t *testing.T) {
		upper, outside := t.TempDir(), t.TempDir()
		os.MkdirAll(filepath.Join(upper, ".git", "refs"), 0o755)
		os.Symlink(outside, filepath.Join(upper, ".git", "refs", "heads"))
		if err := writeBranchUpper(upper, "agentbox/x", commit, -1, -1); err == nil {
			t.Error("wrote through a symlinked refs/heads")
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("outside dir got %d entries", len(entries))
		}
	})
	t.Run("HEAD is a symlink out", func(t *testing.T) {
		upper, outside := t.TempDir(), t.TempDir()
		target := filepath.Join(outside, "victim")
		os.WriteFile(target, []byte("host file\n"), 0o644)
		os.MkdirAll(filepath.Join(upper, ".git"), 0o755)
		os.Symlink(target, filepath.Join(upper, ".git", "HEAD"))
		if err := writeBranchUpper(upper, "b", commit, -1, -1); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(target); string(b) != "host file\n" {
			t.Errorf("host file changed to %q", b)
		}
		st, err := os.Lstat(filepath.Join(upper, ".git", "HEAD"))
		if err != nil || !st.Mode().IsRegular() {
			t.Errorf("HEAD is not a regular file now: %v %v", st, err)
		}
		if b, _ := os.ReadFile(filepath.Join(upper, ".git", "refs", "heads", "b")); string(b) != commit+"\n" {
			t.Errorf("ref = %q", b)
		}
	})
	t.Run("ref name collides with a file", func(t *testing.T) {
		upper := t.TempDir()
		os.MkdirAll(filepath.Join(upper, ".git", "refs", "heads"), 0o755)
		os.WriteFile(filepath.Join(upper, ".git", "refs", "heads", "agentbox"), []byte(commit+"\n"), 0o644)
		if err := writeBranchUpper(upper, "agentbox/x", commit, -1, -1); err == nil {
			t.Error("made a ref below a file")
		}
	})
}
