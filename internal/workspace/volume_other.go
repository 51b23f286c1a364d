//go:build !linux

package workspace

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

var errNoVolume = fmt.Errorf("workspace disk quotas need Linux (loop-mounted ext4): %w", errdefs.ErrUnavailable)

// quotaDriver refuses quotas off Linux.
type quotaDriver struct {
	inner Driver
	quota int64
}

// WithQuota returns d, or off Linux a driver that refuses quotas.
func WithQuota(d Driver, quota int64, _ string) Driver {
	if quota <= 0 {
		return d
	}
	return quotaDriver{inner: d, quota: quota}
}

func (q quotaDriver) Name() string                                     { return q.inner.Name() }
func (q quotaDriver) Files(dir string) string                          { return q.inner.Files(dir) }
func (quotaDriver) Create(context.Context, string, Source) error       { return errNoVolume }
func (quotaDriver) Fork(context.Context, string, string, Source) error { return errNoVolume }
func (quotaDriver) Attach(context.Context, string, string) error       { return errNoVolume }
func (quotaDriver) Detach(context.Context, string) error               { return nil }
func (quotaDriver) Attached(string) (bool, error)                      { return false, nil }

// ProbeVolume needs Linux.
func ProbeVolume(context.Context, string, string) error { return errNoVolume }

// VolumeUsage needs Linux.
func VolumeUsage(string) (Usage, error) { return Usage{}, errNoVolume }

func unmountVolume(string) error { return nil }

// Thaw has nothing to thaw where volumes cannot be frozen.
func Thaw(string) (bool, error) { return false, nil }
