//go:build !linux

package diskusage

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

var errUnsupported = fmt.Errorf("measuring disk usage is implemented on Linux only: %w", errdefs.ErrUnavailable)

// Measure is implemented on Linux only.
func Measure(dir string) (Usage, error) {
	return Usage{}, errUnsupported
}

// Tree is implemented on Linux only.
func Tree(dir string) (int64, error) { return 0, errUnsupported }

// Exclusive is implemented on Linux only.
func Exclusive(paths ...string) (int64, error) { return 0, errUnsupported }
