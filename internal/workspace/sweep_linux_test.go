package workspace

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepTempHostile: the sweep removes the temp files a crash left in
// the upper layer, at any depth, and nothing else; a FIFO where a
// directory was does not block it, and a symlink to a host directory
// holding a temp file is not followed (SECURITY.md H43).
func TestSweepTempHostile(t *testing.T) {
	fx := newFixture(t, Overlay)
	d, err := New(Overlay)
	if err != nil {
		t.Fatal(err)
	}
	dir := fx.create(t, d, "ws")
	files := d.Files(dir)
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, ".agentbox-tmp-host"), "host\n")
	mustWrite(t, filepath.Join(files, "a", "b", ".agentbox-tmp-1"), "cut short\n")
	mustWrite(t, filepath.Join(files, "a", "keep.txt"), "kept\n")
	if err := unix.Mkfifo(filepath.Join(files, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	symlink(t, outside, filepath.Join(files, "link"))

	done := make(chan int, 1)
	go func() { done <- SweepTemp(d, dir) }()
	if n := <-done; n != 1 {
		t.Errorf("SweepTemp removed %d files, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(files, "a", "b", ".agentbox-tmp-1")); !os.IsNotExist(err) {
		t.Errorf("the temp file is still there: %v", err)
	}
	for _, p := range []string{filepath.Join(outside, ".agentbox-tmp-host"), filepath.Join(files, "a", "keep.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
