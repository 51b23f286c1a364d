package local

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.ImageInspector = (*Backend)(nil)

// image finds the root file system and config of a spec's image: an image
// named by path unpacked into ImageCache (no engine needed), an unpacked
// build in ImagesDir, else the engine's image unpacked into ImageCache.
func (b *Backend) image(ctx context.Context, name string) (string, image.Config, error) {
	if image.IsPathRef(name) {
		u, err := image.UnpackPath(ctx, name, b.opts.ImageCache)
		if err != nil {
			return "", image.Config{}, err
		}
		return u.Rootfs, u.Config, nil
	}
	kind, rootfs, err := imageRootfs(b.opts.ImagesDir, name)
	if err == nil {
		if fi, serr := os.Stat(rootfs); serr == nil && fi.IsDir() {
			return rootfs, image.BuiltinConfig, nil
		}
	}
	u, uerr := image.Unpack(ctx, name, b.opts.ImageCache)
	if uerr == nil {
		return u.Rootfs, u.Config, nil
	}
	if err == nil && (errors.Is(uerr, errdefs.ErrUnavailable) || errors.Is(uerr, errdefs.ErrInvalid)) {
		// A name the local backend knows: say how to build its root file system.
		return "", image.Config{}, errdefs.Invalid("image %q: no root file system at %s, and %v: %s", name, rootfs, uerr, buildHint(kind))
	}
	if errors.Is(uerr, errdefs.ErrInvalid) || errors.Is(uerr, errdefs.ErrUnavailable) {
		return "", image.Config{}, errdefs.Invalid("image %q: %v", name, uerr)
	}
	return "", image.Config{}, uerr
}

// ImageConfig reads an image's ENV, WORKDIR and USER as the local backend
// runs it, its USER resolved in the root file system's own passwd.
func (b *Backend) ImageConfig(ctx context.Context, name string) (sandbox.ImageConfig, error) {
	rootfs, cfg, err := b.image(ctx, name)
	if err != nil {
		return sandbox.ImageConfig{}, err
	}
	out := sandbox.ImageConfig{Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User}
	if cfg.User == "" {
		return out, nil
	}
	passwd, group, err := image.ReadAccountFiles(rootfs)
	if err != nil {
		return sandbox.ImageConfig{}, fmt.Errorf("image %s: reading its users: %w", name, err)
	}
	a, err := image.ResolveUser(cfg.User, passwd, group)
	if err != nil {
		return sandbox.ImageConfig{}, fmt.Errorf("image %s: %w", name, err)
	}
	if a != nil {
		out.Account = &sandbox.Account{Name: a.Name, UID: a.UID, GID: a.GID, Home: a.Home}
	}
	return out, nil
}

var _ sandbox.ImageCollector = (*Backend)(nil)

// CollectImages removes the images unpacked in ImageCache whose image is
// gone and that no sandbox of any daemon runs from (image.CollectCache).
func (b *Backend) CollectImages(ctx context.Context, dryRun bool) ([]sandbox.CollectedImage, error) {
	items, err := image.CollectCache(ctx, b.opts.ImageCache, dryRun)
	out := make([]sandbox.CollectedImage, 0, len(items))
	for _, it := range items {
		c := sandbox.CollectedImage{ID: it.ID, Name: it.Name, Reason: it.Reason, Bytes: it.Bytes, Removed: it.Removed}
		if it.Err != nil {
			c.Error = it.Err.Error()
		}
		out = append(out, c)
	}
	return out, err
}

// holdImage takes the collector's shared lock on the root file system a
// sandbox runs from while it runs (image.HoldRootfs), looking the image
// up again if it was collected between its lookup and the hold.
func (b *Backend) holdImage(ctx context.Context, id, name, rootfs string) (string, error) {
	for range 3 {
		h, err := image.HoldRootfs(ctx, b.opts.ImageCache, rootfs)
		if err == nil {
			b.mu.Lock()
			b.holds[id] = h
			b.mu.Unlock()
			return rootfs, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if rootfs, _, err = b.image(ctx, name); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("image %s: its unpacked root file system keeps being collected: %w", name, errdefs.ErrConflict)
}

// releaseImage ends a sandbox's hold on its root file system.
func (b *Backend) releaseImage(id string) {
	b.mu.Lock()
	h := b.holds[id]
	delete(b.holds, id)
	b.mu.Unlock()
	h.Release()
}
