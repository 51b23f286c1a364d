//go:build !linux

package docker

import "github.com/agentbox/agentbox/internal/errdefs"

func (b *Backend) poolPoint(id string) (string, func() error, error) {
	return "", nil, errdefs.Invalid("the %s backend creates sandboxes only on Linux", b.name)
}

func (b *Backend) attach(id, files string) error {
	return errdefs.Invalid("the %s backend creates sandboxes only on Linux", b.name)
}
