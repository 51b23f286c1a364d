package image

import (
	"archive/tar"
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
	"strings"
	"time"

	"github.com/moby/moby/client"

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
	if err := os.Chmod(tmp, 0o755); err != nil {
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
		"--numeric-owner", "--same-owner", "--same-permissions", "--no-overwrite-dir")
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

// checkLayers reads every layer of img as an unpack would, writing
// nothing: the same checks (digests, names, links, budget) before the
// engine is given the image.
func checkLayers(img *pathImage) error {
	return newFlattener(img, io.Discard).run()
}

// LoadPath makes the engine hold the image a path reference names, and
// returns its id (its config digest, which the engine keeps as its id).
// An image the engine has already is not loaded again. The image is
// loaded untagged, so that a path can never take over a name the engine
// knows, and is run by id. A layout (which this engine's load does not
// take) is converted into the archive `docker save` writes, on the fly.
func LoadPath(ctx context.Context, ref string) (string, error) {
	r, err := ParsePathRef(ref)
	if err != nil {
		return "", err
	}
	img, err := openPath(r)
	if err != nil {
		return "", err
	}
	defer img.Close()
	c, err := connect(ctx)
	if err != nil {
		return "", fmt.Errorf("loading image %s: %w", r, err)
	}
	defer c.Close()
	if _, ok, err := inspect(ctx, c, img.id); err != nil {
		return "", fmt.Errorf("loading image %s: %w", r, err)
	} else if ok {
		return img.id, nil
	}
	if err := checkLayers(img); err != nil {
		if !errors.Is(err, errdefs.ErrTooLarge) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrInvalid)
		}
		return "", fmt.Errorf("loading image %s: %w", r, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeDockerArchive(img, pw)) }()
	res, err := c.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("loading image %s: %w", r, engineErr("loading", err))
	}
	defer res.Close()
	if err := loadReply(res); err != nil {
		return "", fmt.Errorf("loading image %s: %w", r, err)
	}
	if _, ok, err := inspect(ctx, c, img.id); err != nil || !ok {
		return "", fmt.Errorf("loading image %s: the engine does not have %s after loading it (%v)", r, img.id, err)
	}
	return img.id, nil
}

// loadReply reads the engine's JSON message stream of a load and returns
// the error it ends with, if any.
func loadReply(body io.Reader) error {
	dec := json.NewDecoder(body)
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the engine's reply: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}

// writeDockerArchive writes img as `docker save` does, untagged: its
// config, each layer as stored (the engine undoes gzip itself), and a
// manifest.json naming them.
func writeDockerArchive(img *pathImage, w io.Writer) error {
	tw := tar.NewWriter(w)
	hexID, _ := idHex(img.id)
	now := time.Unix(0, 0)
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: now}); err != nil {
			return err
		}
		_, err := io.CopyN(tw, r, size)
		return err
	}
	if err := add(hexID+".json", int64(len(img.raw)), strings.NewReader(string(img.raw))); err != nil {
		return err
	}
	var layers []string
	for i, l := range img.layers {
		rc, size, err := img.store.open(l.name)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%d/layer.tar", i)
		err = add(name, size, rc)
		rc.Close()
		if err != nil {
			return err
		}
		layers = append(layers, name)
	}
	m, _ := json.Marshal([]map[string]any{{"Config": hexID + ".json", "RepoTags": nil, "Layers": layers}})
	if err := add("manifest.json", int64(len(m)), strings.NewReader(string(m))); err != nil {
		return err
	}
	return tw.Close()
}
