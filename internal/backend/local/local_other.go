//go:build !linux

package local

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var errNotLinux = fmt.Errorf("local backend: bubblewrap jails need Linux: %w", errdefs.ErrUnavailable)

// Backend is unavailable off Linux.
type Backend struct{}

// Usage is what the kernel has counted for one sandbox (Linux only).
type Usage struct{}

// New fails off Linux.
func New(opts Options) (*Backend, error) { return nil, errNotLinux }

func (b *Backend) Name() string { return Name }
func (b *Backend) Close() error { return nil }
func (b *Backend) Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}
func (b *Backend) Inspect(ctx context.Context, ref string) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}
func (b *Backend) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	return nil, errNotLinux
}
func (b *Backend) Stop(ctx context.Context, ref string) error           { return errNotLinux }
func (b *Backend) Remove(ctx context.Context, ref string) error         { return errNotLinux }
func (b *Backend) Pause(ctx context.Context, ref string) error          { return errNotLinux }
func (b *Backend) Resume(ctx context.Context, ref string) error         { return errNotLinux }
func (b *Backend) Usage(ctx context.Context, ref string) (Usage, error) { return Usage{}, errNotLinux }
func (b *Backend) GuestLog(ref string) string                           { return "" }

// OOMKills fails off Linux.
func (b *Backend) OOMKills(ctx context.Context, ref string) (uint64, error) { return 0, errNotLinux }
