//go:build !linux

package anonmount

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

var errNotLinux = fmt.Errorf("mounts need Linux: %w", errdefs.ErrUnavailable)

// Overlay needs Linux.
func Overlay(lower, dir, upper, work, merged string, flags uintptr, data string) error {
	return errNotLinux
}

// View needs Linux.
func View(target, src string) error { return errNotLinux }

// Tmpfs needs Linux.
func Tmpfs(dir string, size, inodes int64) error { return errNotLinux }

// Detach needs Linux.
func Detach(path string) error { return errNotLinux }
