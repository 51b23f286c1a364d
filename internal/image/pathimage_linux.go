package image

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/flock"
)

// InspectPath reads the image a path reference names (its id and run
// configuration) without unpacking or loading it. Digests of the index,
// manifest and config are checked; layers are checked when read.
func InspectPath(ref string) (id string, cfg Config, err error) {
	r, err := ParsePathRef(ref)
	if err != nil {
		return "", Config{}, err
	}
	img, err := openPath(r)
	if err != nil {
		return "", Config{}, err
	}
	defer img.Close()
	return img.id, img.Config(), nil
}

// UnpackPath is Unpack for an image named by path (see ParsePathRef): it
// unpacks the layout's or archive's image into cacheDir/ID, ID being its
// config digest (what the engine calls its image id), without any engine.
// The layers are flattened in Go (see flattener), so that no hostile
// layer writes outside the new root file system, and extracted by GNU tar
// as root, keeping owners and modes. Bad paths and corrupt archives give
// an ErrInvalid naming the path and leave the cache as it was.
func UnpackPath(ctx context.Context, ref, cacheDir string) (Unpacked, error) {
	r, err := ParsePathRef(ref)
	if err != nil {
		return Unpacked{}, err
	}
	img, err := openPath(r)
	if err != nil {
		return Unpacked{}, err
	}
	defer img.Close()
	fail := func(err error) (Unpacked, error) {
		if !errors.Is(err, errdefs.ErrTooLarge) && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrInvalid)
		}
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	if u, ok := CachedID(cacheDir, img.id); ok {
		RecordPath(cacheDir, r.String(), img.id, "local")
		return u, nil
	}
	hexID, _ := idHex(img.id)
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	l, err := flock.Acquire(ctx, filepath.Join(cacheDir, "."+hexID+".lock"))
	if err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	defer l.Unlock()
	if u, ok := CachedID(cacheDir, img.id); ok {
		RecordPath(cacheDir, r.String(), img.id, "local")
		return u, nil
	}
	rnd := make([]byte, 6)
	rand.Read(rnd)
	tmp := filepath.Join(cacheDir, ".unpack-"+hexID[:12]+"-"+hex.EncodeToString(rnd))
	defer removeTree(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	if err := extractFlat(ctx, img, rootfs); err != nil {
		return fail(err)
	}
	u := Unpacked{ID: img.id, Name: r.String(), Source: r.String(), Config: img.Config(), Unpacked: time.Now().UTC()}
	b, _ := json.MarshalIndent(u, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, unpackedFile), b, 0o644); err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	// Root only: an image's setuid files must not be a way up for the
	// host's other users. Sandboxes reach the root file system through
	// the local backend's stage, bound as root.
	if err := os.Chmod(tmp, 0o700); err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	final := filepath.Join(cacheDir, hexID)
	if err := os.Rename(tmp, final); err != nil {
		return Unpacked{}, fmt.Errorf("unpacking image %s: %w", r, err)
	}
	u.Rootfs = filepath.Join(final, "rootfs")
	RecordPath(cacheDir, r.String(), img.id, "local")
	return u, nil
}

// extractFlat flattens img's layers into dir. The Go side decides what is
// written and where (see flattener); GNU tar only creates it.
func extractFlat(ctx context.Context, img *pathImage, dir string) error {
	pr, pw := io.Pipe()
	flat := make(chan error, 1)
	go func() {
		err := newFlattener(img, pw).run()
		pw.CloseWithError(err)
		flat <- err
	}()
	stderr := newTail(10)
	cmd := exec.CommandContext(ctx, "tar", "--extract", "--file=-", "--directory="+dir,
		"--numeric-owner", "--same-owner", "--same-permissions")
	cmd.Stdin, cmd.Stderr = pr, stderr
	runErr := cmd.Run()
	pr.CloseWithError(errors.New("extraction ended"))
	if err := <-flat; err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("extracting: %v: %s", runErr, stderr)
	}
	return nil
}
