package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
)

// Unpacked is an image unpacked into the cache.
type Unpacked struct {
	// ID is the engine's image id ("sha256:...").
	ID string `json:"id"`
	// Name is the reference it was unpacked as.
	Name string `json:"name"`
	// Source is the path reference (oci:..., oci-archive:...,
	// docker-archive:...) it was unpacked from; empty for the engine's.
	Source string `json:"source,omitempty"`
	// Rootfs is the unpacked root file system.
	Rootfs string `json:"rootfs"`
	// Config is the image's run configuration.
	Config Config `json:"config"`
	// Unpacked is when it was unpacked.
	Unpacked time.Time `json:"unpacked"`
}

// BuiltinConfig is the config of the images Build makes, for a root file system that
// Build unpacked itself (with no engine to ask).
var BuiltinConfig = Config{Env: []string{"PATH=" + pathEnv}, WorkingDir: WorkspaceDir}

// unpackedFile holds an entry's Unpacked, next to its rootfs.
const unpackedFile = "image.json"

// CachedID returns the unpacked image with engine id id, if the cache has it.
func CachedID(cacheDir, id string) (Unpacked, bool) {
	hexID, ok := idHex(id)
	if !ok {
		return Unpacked{}, false
	}
	b, err := os.ReadFile(filepath.Join(cacheDir, hexID, unpackedFile))
	if err != nil {
		return Unpacked{}, false
	}
	var u Unpacked
	if json.Unmarshal(b, &u) != nil || u.ID != id {
		return Unpacked{}, false
	}
	u.Rootfs = filepath.Join(cacheDir, hexID, "rootfs")
	return u, true
}

// Unpack returns the root file system and config of the engine's image name, unpacking
// it into cacheDir/ID the first time (a flattened export of a container made from it,
// never started). Device nodes, FIFOs and sockets of the image are left out: a sandbox's
// root is bound read-only without nodev. Concurrent unpacks of one image share the work.
func Unpack(ctx context.Context, name, cacheDir string) (Unpacked, error) {
	fail := func(err error) (Unpacked, error) { return Unpacked{}, fmt.Errorf("unpacking image %s: %w", name, err) }
	if strings.TrimSpace(name) == "" {
		return Unpacked{}, errdefs.Invalid("unpacking image: no name")
	}
	c, err := connect(ctx)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	img, ok, err := inspect(ctx, c, name)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return fail(errdefs.Invalid("the engine has no image %s (agentbox image build makes one; nothing is pulled)", name))
	}
	if u, ok := CachedID(cacheDir, img.ID); ok {
		return u, nil
	}
	hexID, ok := idHex(img.ID)
	if !ok {
		return fail(fmt.Errorf("the engine gave an image id %q that is not sha256", img.ID))
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fail(err)
	}
	l, err := flock.Acquire(ctx, filepath.Join(cacheDir, "."+hexID+".lock"))
	if err != nil {
		return fail(err)
	}
	defer l.Unlock()
	if u, ok := CachedID(cacheDir, img.ID); ok {
		return u, nil // another process unpacked it meanwhile
	}
	rnd := make([]byte, 6)
	rand.Read(rnd)
	tmp := filepath.Join(cacheDir, ".unpack-"+hexID[:12]+"-"+hex.EncodeToString(rnd))
	defer removeTree(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return fail(err)
	}
	if err := exportInto(ctx, c, img.ID, rootfs); err != nil {
		return fail(err)
	}
	if err := dropSpecialFiles(rootfs); err != nil {
		return fail(err)
	}
	u := Unpacked{ID: img.ID, Name: name, Unpacked: time.Now().UTC()}
	if img.Config != nil {
		u.Config = Config{Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, User: img.Config.User}
	}
	b, _ := json.MarshalIndent(u, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, unpackedFile), b, 0o644); err != nil {
		return fail(err)
	}
	// Root only: an image's setuid files must not be a way up for the
	// host's other users. Sandboxes reach the root file system through
	// the local backend's stage, bound as root.
	if err := os.Chmod(tmp, 0o700); err != nil {
		return fail(err)
	}
	final := filepath.Join(cacheDir, hexID)
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	u.Rootfs = filepath.Join(final, "rootfs")
	return u, nil
}

// exportInto unpacks a flattened export of image id into dir.
func exportInto(ctx context.Context, c *client.Client, id, dir string) error {
	created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{Image: id, Entrypoint: []string{"/agentbox-unpack-never-runs"},
			Labels: map[string]string{"agentbox.unpack": "1"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		return engineErr("creating a container to export", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c.ContainerRemove(cctx, created.ID, client.ContainerRemoveOptions{Force: true})
	}()
	exp, err := c.ContainerExport(ctx, created.ID, client.ContainerExportOptions{})
	if err != nil {
		return engineErr("exporting", err)
	}
	defer exp.Close()
	stderr := newTail(10)
	// GNU tar as root keeps owners, modes and capabilities, and does not follow a link
	// from the archive out of dir.
	cmd := exec.CommandContext(ctx, "tar", "--extract", "--file=-", "--directory="+dir,
		"--numeric-owner", "--same-owner", "--same-permissions", "--xattrs", "--xattrs-include=security.capability")
	cmd.Stdin, cmd.Stderr = exp, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("unpacking the export: %v: %s", err, stderr)
	}
	return nil
}

// dropSpecialFiles removes device nodes, FIFOs and sockets under root.
func dropSpecialFiles(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			return os.Remove(p)
		}
		return nil
	})
}
