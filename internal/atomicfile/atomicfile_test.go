package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	// Racing writers: one wins, the others see fs.ErrExist, and the file
	// holds exactly one writer's content.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = WriteNew(p, 0o600, []byte{byte('a' + i)})
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, fs.ErrExist):
			t.Errorf("a losing writer got %v, want fs.ErrExist", err)
		}
	}
	b, err := os.ReadFile(p)
	if won != 1 || err != nil || len(b) != 1 {
		t.Fatalf("%d writers won; the file is %q, %v", won, b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".key.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
}
