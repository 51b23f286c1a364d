//go:build !linux

package image

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Build needs Linux: debootstrap, root-owned trees and the engine's Linux
// images. List and Exists work anywhere an engine is reachable.
func Build(ctx context.Context, opts BuildOptions) (Image, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return Image{}, err
	}
	return Image{}, fmt.Errorf("building image %s: image builds need Linux: %w", o.Name, errdefs.ErrUnavailable)
}

// Runnable is an image and the backends that can run it (Linux only).
type Runnable struct {
	Image
	Backends []string `json:"backends"`
}

// ListRunnable needs Linux: every backend does.
func ListRunnable(ctx context.Context, dataDir, cacheDir string) ([]Runnable, error) {
	return nil, fmt.Errorf("listing images: agentbox's backends need Linux: %w", errdefs.ErrUnavailable)
}
