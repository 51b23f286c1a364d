//go:build !linux

package gitx

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func (j *Jail) command(string, []string) (string, []string, error) {
	return "", nil, fmt.Errorf("confining host-side git needs Linux mount namespaces: %w", errdefs.ErrUnavailable)
}
