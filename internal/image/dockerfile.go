package image

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// KindDockerfile marks an image built from a caller's Dockerfile.
const KindDockerfile Kind = "dockerfile"

// DockerfileOptions says what to build from a Dockerfile.
type DockerfileOptions struct {
	// Dockerfile is the path of the Dockerfile; its directory is the build
	// context.
	Dockerfile string
	// Name is the image reference to create (required).
	Name string
	// Progress receives the engine's build output; nil discards it.
	Progress io.Writer
}

// BuildDockerfile builds an image from a Dockerfile through the engine. Nothing is
// pulled: a FROM must name an image the engine has (agentbox/debian:bookworm, say), and
// a base it lacks fails the build with the engine's reason. The image carries the
// agentbox.image.kind label "dockerfile"; the local backend unpacks it from the engine on
// first use like any other.
func BuildDockerfile(ctx context.Context, opts DockerfileOptions) (Image, error) {
	if opts.Dockerfile == "" {
		return Image{}, errdefs.Invalid("building image: no Dockerfile given")
	}
	if opts.Name == "" {
		return Image{}, errdefs.Invalid("building image from %s: no tag given (--tag)", opts.Dockerfile)
	}
	name, err := normalizeName(opts.Name)
	if err != nil {
		return Image{}, err
	}
	fail := func(err error) (Image, error) {
		return Image{}, fmt.Errorf("building image %s from %s: %w", name, opts.Dockerfile, err)
	}
	abs, err := filepath.Abs(opts.Dockerfile)
	if err != nil {
		return fail(err)
	}
	if fi, err := os.Stat(abs); err != nil {
		return fail(errdefs.Invalid("%v", err))
	} else if !fi.Mode().IsRegular() {
		return fail(errdefs.Invalid("%s is not a file", abs))
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	c, err := connect(ctx)
	if err != nil {
		return fail(err)
	}
	defer c.Close()

	dir := filepath.Dir(abs)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarContext(dir, pw)) }()
	defer pr.Close()
	res, err := c.ImageBuild(ctx, pr, client.ImageBuildOptions{
		Tags: []string{name}, Dockerfile: filepath.Base(abs),
		Remove: true, ForceRemove: true, PullParent: false,
		Labels: map[string]string{LabelKind: string(KindDockerfile)},
	})
	if err != nil {
		return fail(engineErr("starting the build", err))
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	for {
		var m struct {
			Stream      string `json:"stream"`
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return fail(fmt.Errorf("reading the engine's reply: %w", err))
		}
		switch {
		case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
			return fail(fmt.Errorf("%s", strings.TrimSpace(m.ErrorDetail.Message)))
		case m.Error != "":
			return fail(fmt.Errorf("%s", strings.TrimSpace(m.Error)))
		case m.Stream != "":
			io.WriteString(progress, m.Stream)
		case m.Status != "":
			fmt.Fprintln(progress, m.Status)
		}
	}
	img, ok, err := inspect(ctx, c, name)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return fail(fmt.Errorf("the engine reported no error but has no image %s", name))
	}
	return describe(name, img), nil
}

// tarContext writes dir as a build context: regular files, directories and symlinks,
// names relative to dir; anything else (sockets, devices, FIFOs) is left out.
func tarContext(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archiving the build context %s: %w", dir, err)
	}
	return tw.Close()
}
