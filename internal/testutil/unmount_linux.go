package testutil

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Unmount unmounts path as an operator's umount would, failing t if it
// stays busy. A mount is briefly busy while any process of the test binary
// is between fork and exec: the child holds copies of every descriptor,
// including one open on the mount, until exec closes it. Parallel tests
// fork git all the time, so EBUSY is retried until a deadline; a holder
// that outlives it is a real leak and fails the test.
func Unmount(t testing.TB, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Unmount(path, 0)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("unmounting %s: %v", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
