//go:build !linux

package workspace

import (
	"context"
	"fmt"
	"runtime"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func copyTree(context.Context, string, string) error {
	return fmt.Errorf("copying workspaces needs Linux, not %s: %w", runtime.GOOS, errdefs.ErrUnavailable)
}
