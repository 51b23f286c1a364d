//go:build !linux

package workspace

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/agentbox/agentbox/internal/errdefs"
)

var errNoOverlay = fmt.Errorf("overlay workspaces need Linux, not %s: %w", runtime.GOOS, errdefs.ErrUnavailable)

type overlayDriver struct{}

func (overlayDriver) Name() string                                       { return Overlay }
func (overlayDriver) Files(dir string) string                            { return filepath.Join(dir, "merged") }
func (overlayDriver) Create(context.Context, string, Source) error       { return errNoOverlay }
func (overlayDriver) Fork(context.Context, string, string, Source) error { return errNoOverlay }
func (overlayDriver) Attach(context.Context, string, string) error       { return errNoOverlay }
func (overlayDriver) Detach(context.Context, string) error               { return nil }
func (overlayDriver) Attached(string) (bool, error)                      { return false, nil }

// IsMountPoint is unsupported off Linux.
func IsMountPoint(string) (bool, error) { return false, errNoOverlay }

// ProbeOverlay always fails off Linux.
func ProbeOverlay(string) error { return errNoOverlay }
