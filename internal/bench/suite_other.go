//go:build !linux

package bench

import (
	"context"
	"errors"
)

// hostSuite needs mount namespaces and chroot: Linux only.
func hostSuite(context.Context, string) (suiteRun, func(), error) {
	return nil, nil, errors.New("bench: the suite's host baseline runs on Linux only")
}
