// Package atomicfile writes files that must appear whole or not at all,
// and only once: keys and certificates that several daemons on one data
// dir may try to create at the same moment.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// WriteNew writes content to p, which must not exist yet, with mode. The
// content goes to a temporary file in the same directory, is synced, and
// is linked into place: a reader sees nothing or everything, a crash
// leaves no half-written p, and when several callers race, exactly one
// succeeds and the others get an error that satisfies
// errors.Is(err, fs.ErrExist).
func WriteNew(p string, mode fs.FileMode, content []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Link(tmp.Name(), p); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		_ = d.Sync() // the new name, durably
		d.Close()
	}
	return nil
}
