//go:build !linux

package fileapi

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// The flags are only meaningful on Linux, where Open succeeds.
const (
	oNonblock  = 0
	oNofollow  = 0
	oDirectory = 0
)

// supported refuses other systems: the FIFO and symlink defences rely on
// Linux open flags and have not been checked elsewhere.
func supported() error {
	return fmt.Errorf("the file API needs linux, not %s: %w", runtime.GOOS, errdefs.ErrUnavailable)
}

func errnoClass(syscall.Errno) error { return nil }
