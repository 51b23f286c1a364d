package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// connect opens a client to the engine named by the environment (DOCKER_HOST
// or the default socket) and negotiates the API version with it: the engine
// here speaks 1.41, far below this client's maximum.
func connect(ctx context.Context) (*client.Client, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %v: %w", err, errdefs.ErrUnavailable)
	}
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		host := c.DaemonHost()
		c.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("docker engine at %s: %w", host, ctx.Err())
		}
		return nil, fmt.Errorf("docker engine at %s: %v: %w", host, err, errdefs.ErrUnavailable)
	}
	return c, nil
}

// engineErr classifies an error of an engine call on object.
func engineErr(object string, err error) error {
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%s: %v: %w", object, err, errdefs.ErrNotFound)
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%s: %v: %w", object, err, errdefs.ErrInvalid)
	case cerrdefs.IsConflict(err):
		return fmt.Errorf("%s: %v: %w", object, err, errdefs.ErrConflict)
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return fmt.Errorf("%s: %v: %w", object, err, errdefs.ErrUnavailable)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", object, err)
	}
	return fmt.Errorf("%s: %w", object, err)
}

// List returns the images in the engine that this package built (labelled
// agentbox.image.kind), one entry per tag, sorted by name. Untagged leftovers
// of earlier builds are not listed. Rootfs is left empty: where a root file
// system is unpacked is the caller's choice, not something the engine knows.
func List(ctx context.Context) ([]Image, error) {
	c, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	defer c.Close()
	res, err := c.ImageList(ctx, client.ImageListOptions{
		Filters: make(client.Filters).Add("label", LabelKind),
	})
	if err != nil {
		return nil, engineErr("listing images", err)
	}
	out := []Image{}
	for _, s := range res.Items {
		for _, tag := range s.RepoTags {
			if tag == "<none>:<none>" {
				continue
			}
			out = append(out, fromLabels(tag, s.ID, s.Labels, s.Size, time.Unix(s.Created, 0)))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Exists reports whether the engine has an image by this name (or id). Any
// image is accepted, not only the ones built here: a caller may bring its
// own.
func Exists(ctx context.Context, name string) (bool, error) {
	if strings.TrimSpace(name) == "" {
		return false, errdefs.Invalid("image name is empty")
	}
	if _, err := reference.ParseAnyReference(name); err != nil {
		return false, errdefs.Invalid("image name %q: %v", name, err)
	}
	c, err := connect(ctx)
	if err != nil {
		return false, fmt.Errorf("looking up image %s: %w", name, err)
	}
	defer c.Close()
	_, err = c.ImageInspect(ctx, name)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, engineErr("looking up image "+name, err)
}

// fromLabels builds an Image from what the engine knows about it.
func fromLabels(name, id string, labels map[string]string, size int64, created time.Time) Image {
	img := Image{
		Name:      name,
		ID:        id,
		Kind:      Kind(labels[LabelKind]),
		SizeBytes: size,
		Created:   created.UTC(),
	}
	img.UID, _ = strconv.Atoi(labels[LabelUID])
	img.GID, _ = strconv.Atoi(labels[LabelGID])
	return img
}

// inspect returns the image by name, or ok=false if there is none.
func inspect(ctx context.Context, c *client.Client, name string) (img client.ImageInspectResult, ok bool, err error) {
	img, err = c.ImageInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return img, false, nil
	}
	if err != nil {
		return img, false, engineErr("inspecting image "+name, err)
	}
	return img, true, nil
}

// describe turns an inspected image into an Image.
func describe(name string, img client.ImageInspectResult) Image {
	var labels map[string]string
	if img.Config != nil {
		labels = img.Config.Labels
	}
	created, _ := time.Parse(time.RFC3339Nano, img.Created)
	return fromLabels(name, img.ID, labels, img.Size, created)
}

// imageLabels is what Build sets on an image.
func imageLabels(o BuildOptions, r recipe) map[string]string {
	l := map[string]string{
		LabelKind:   string(o.Kind),
		LabelRecipe: r.Hash(),
		LabelUID:    strconv.Itoa(o.UID),
		LabelGID:    strconv.Itoa(o.GID),
	}
	if len(o.Packages) > 0 {
		l[LabelPackages] = strings.Join(o.Packages, ",")
	}
	return l
}

// importChanges is the image config, as the Dockerfile instructions that
// the import endpoint accepts (Docker 20.10, API 1.41: CMD, ENTRYPOINT, ENV,
// EXPOSE, HEALTHCHECK, LABEL, ONBUILD, USER, VOLUME, WORKDIR; it refuses
// STOPSIGNAL, SHELL, MAINTAINER). User stays empty: the backend chooses the
// uid it runs as, and the uid/gid labels say which one owns the home.
func importChanges(o BuildOptions, r recipe) []string {
	shell := "/bin/sh"
	if o.Kind == KindDebian {
		shell = "/bin/bash"
	}
	labels := imageLabels(o, r)
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var lb strings.Builder
	lb.WriteString("LABEL")
	for _, k := range keys {
		fmt.Fprintf(&lb, " %s=%s", k, dockerfileQuote(labels[k]))
	}
	return []string{
		"ENV PATH=" + pathEnv,
		"WORKDIR " + WorkspaceDir,
		fmt.Sprintf("CMD [%q]", shell),
		lb.String(),
	}
}

// dockerfileQuote double-quotes s for a Dockerfile LABEL value.
func dockerfileQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", " ")
	return `"` + r.Replace(s) + `"`
}

// importTar imports a root file system tar into the engine as name and
// returns the new image id. The engine answers with a JSON message stream
// whose last status is the id, or an error message.
func importTar(ctx context.Context, c *client.Client, tar io.Reader, name string, changes []string) (string, error) {
	body, err := c.ImageImport(ctx, client.ImageImportSource{Source: tar, SourceName: "-"}, name,
		client.ImageImportOptions{Changes: changes, Message: "built by agentbox"})
	if err != nil {
		return "", engineErr("importing", err)
	}
	defer body.Close()
	var id string
	dec := json.NewDecoder(body)
	for {
		var m struct {
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("importing: reading engine reply: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return "", fmt.Errorf("importing: %s", m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return "", fmt.Errorf("importing: %s", m.Error)
		}
		if strings.HasPrefix(m.Status, "sha256:") {
			id = strings.TrimSpace(m.Status)
		}
	}
	if id == "" {
		return "", errors.New("importing: the engine returned no image id")
	}
	return id, nil
}
