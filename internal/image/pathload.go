package image

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
)

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
func LoadPath(ctx context.Context, c *client.Client, ref string) (string, error) {
	r, err := ParsePathRef(ref)
	if err != nil {
		return "", err
	}
	img, err := openPath(r)
	if err != nil {
		return "", err
	}
	defer img.Close()
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
