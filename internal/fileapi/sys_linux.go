package fileapi

import (
	"syscall"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Open flags os does not export.
const (
	oNonblock  = syscall.O_NONBLOCK
	oNofollow  = syscall.O_NOFOLLOW
	oDirectory = syscall.O_DIRECTORY
)

func supported() error { return nil }

// errnoClass maps the system errors a hostile or merely busy workspace
// produces to an error class; nil leaves the error unclassified (internal).
func errnoClass(e syscall.Errno) error {
	switch e {
	case syscall.ENOENT:
		return errdefs.ErrNotFound
	case syscall.ELOOP, syscall.ENAMETOOLONG, syscall.ENOTDIR, syscall.EINVAL,
		syscall.ENXIO, syscall.EXDEV:
		return errdefs.ErrInvalid
	case syscall.EEXIST, syscall.ENOTEMPTY, syscall.EISDIR, syscall.EBUSY:
		return errdefs.ErrConflict
	case syscall.EFBIG, syscall.ENOSPC, syscall.EDQUOT:
		return errdefs.ErrTooLarge
	}
	return nil
}
