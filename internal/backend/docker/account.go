package docker

import (
	"archive/tar"
	"context"
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// accountFiles are an image's /etc/passwd and /etc/group, read through a
// container made from it and never started: the engine resolves the paths
// inside the image's root, so nothing of the host is read. A file that is
// missing or not regular reads as empty. Results are kept by image id.
func (b *Backend) accountFiles(ctx context.Context, id string) (passwd, group []byte, err error) {
	if v, ok := b.users.Load(id); ok {
		f := v.([2][]byte)
		return f[0], f[1], nil
	}
	created, err := b.c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: id, Entrypoint: []string{"/agentbox-never-runs"}, NetworkDisabled: true,
			Labels: map[string]string{"agentbox.unpack": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return nil, nil, engineErr(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		b.c.ContainerRemove(cctx, created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	read := func(p string) ([]byte, error) {
		res, err := b.c.CopyFromContainer(ctx, created.ID, client.CopyFromContainerOptions{SourcePath: p})
		if isNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, engineErr(err)
		}
		defer res.Content.Close()
		tr := tar.NewReader(res.Content)
		h, err := tr.Next()
		if err != nil || h.Typeflag != tar.TypeReg {
			return nil, nil
		}
		return io.ReadAll(io.LimitReader(tr, 4<<20))
	}
	if passwd, err = read("/etc/passwd"); err != nil {
		return nil, nil, err
	}
	if group, err = read("/etc/group"); err != nil {
		return nil, nil, err
	}
	b.users.Store(id, [2][]byte{passwd, group})
	return passwd, group, nil
}
