package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// The media types a path image may use. Docker's schema 2 types are
// accepted where OCI's are, as tools write either into OCI layouts.
const (
	mediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// Bounds on the JSON documents of a path image, which are read whole.
const maxJSONBytes = 4 << 20

// blobStore opens the files of a layout directory or an archive by their
// name inside it ("index.json", "blobs/sha256/..."). Nothing it opens is
// outside the layout or archive.
type blobStore interface {
	open(name string) (io.ReadCloser, int64, error)
	Close() error
}

// dirStore is an OCI layout directory. os.Root keeps every open inside
// it, symbolic links included.
type dirStore struct{ root *os.Root }

func (d dirStore) open(name string) (io.ReadCloser, int64, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file", name)
	}
	return f, fi.Size(), nil
}

func (d dirStore) Close() error { return d.root.Close() }

// tarStore is an uncompressed tar archive, indexed once: each member is
// then read in place through a section of the file.
type tarStore struct {
	f       *os.File
	members map[string]tarMember
}

type tarMember struct {
	off, size int64
	link      string // a symbolic link's target, resolved inside the archive
}

// maxArchiveMembers bounds the index of an archive.
const maxArchiveMembers = 1 << 16

func openTarStore(p string) (*tarStore, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("not a regular file")
	}
	s := &tarStore{f: f, members: map[string]tarMember{}}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("not a tar archive: %v", err)
		}
		if len(s.members) >= maxArchiveMembers {
			f.Close()
			return nil, fmt.Errorf("more than %d members", maxArchiveMembers)
		}
		name := cleanMember(h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				f.Close()
				return nil, err
			}
			s.members[name] = tarMember{off: off, size: h.Size}
		case tar.TypeSymlink:
			// docker save links a layer that two images share.
			s.members[name] = tarMember{link: cleanMember(path.Join(path.Dir(name), h.Linkname))}
		}
	}
	if len(s.members) == 0 {
		f.Close()
		return nil, errors.New("not a tar archive: no files in it")
	}
	return s, nil
}

// cleanMember is a member's name relative to the archive's top.
func cleanMember(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (s *tarStore) open(name string) (io.ReadCloser, int64, error) {
	name = cleanMember(name)
	for range 8 {
		m, ok := s.members[name]
		if !ok {
			return nil, 0, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		if m.link == "" {
			return io.NopCloser(io.NewSectionReader(s.f, m.off, m.size)), m.size, nil
		}
		name = m.link
	}
	return nil, 0, fmt.Errorf("%s: too many levels of symbolic links", name)
}

func (s *tarStore) Close() error { return s.f.Close() }

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

// index is an OCI image index (index.json, or a nested one).
type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// manifest is an OCI image manifest.
type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// imageConfig is the part of an image's config this package reads.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// pathImage is an image read from a layout or an archive: its config,
// checked against its digest, and where each layer is.
type pathImage struct {
	ref    PathRef
	store  blobStore
	id     string // "sha256:" and the config's digest
	raw    []byte // the config, as stored
	config imageConfig
	layers []pathLayer
}

// pathLayer is one layer: its file in the store, the digest of that file
// when the manifest gives one (OCI), and the digest of its uncompressed
// tar (the config's diff_id).
type pathLayer struct {
	name   string
	digest string
	diffID string
	size   int64
}

// openPath reads the image that ref names, checking every digest of its
// index, manifest and config; layers are checked as they are read. Errors
// name the path and say what is wrong with it; they are ErrInvalid when
// the path is missing or holds no valid image.
func openPath(ref PathRef) (*pathImage, error) {
	fail := func(format string, a ...any) (*pathImage, error) {
		return nil, errdefs.Invalid("image %s: %s", ref, fmt.Sprintf(format, a...))
	}
	fi, err := os.Stat(ref.Path)
	if err != nil {
		return fail("%v", err)
	}
	var st blobStore
	switch ref.Transport {
	case TransportOCI:
		if !fi.IsDir() {
			return fail("%s is not a directory (an OCI layout is one; oci-archive: names a tar of it)", ref.Path)
		}
		root, err := os.OpenRoot(ref.Path)
		if err != nil {
			return fail("%v", err)
		}
		st = dirStore{root: root}
	default:
		if fi.IsDir() {
			return fail("%s is a directory, not an archive (oci: names an OCI layout directory)", ref.Path)
		}
		ts, err := openTarStore(ref.Path)
		if err != nil {
			return fail("%s: %v", ref.Path, err)
		}
		st = ts
	}
	img := &pathImage{ref: ref, store: st}
	if ref.Transport == TransportDockerArchive {
		err = img.readDockerArchive()
	} else {
		err = img.readLayout()
	}
	if err != nil {
		st.Close()
		return fail("%v", err)
	}
	if err := json.Unmarshal(img.raw, &img.config); err != nil {
		st.Close()
		return fail("config %s: %v", img.id, err)
	}
	if n, m := len(img.config.RootFS.DiffIDs), len(img.layers); n != m {
		st.Close()
		return fail("config %s lists %d layers, the manifest %d", img.id, n, m)
	}
	for i := range img.layers {
		img.layers[i].diffID = img.config.RootFS.DiffIDs[i]
		if _, ok := idHex(img.layers[i].diffID); !ok {
			st.Close()
			return fail("config %s: layer %d has diff_id %q, not a sha256 digest", img.id, i, img.layers[i].diffID)
		}
	}
	if goos := img.config.OS; goos != "" && goos != "linux" {
		st.Close()
		return fail("the image is for %s, not linux", goos)
	}
	if a := img.config.Architecture; a != "" && a != runtime.GOARCH {
		st.Close()
		return fail("the image is for %s, this host is %s", a, runtime.GOARCH)
	}
	return img, nil
}

// Close releases the layout or archive.
func (img *pathImage) Close() error { return img.store.Close() }

// readJSON reads a small file of the store whole.
func (img *pathImage) readJSON(name string, v any) ([]byte, error) {
	r, size, err := img.store.open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if size > maxJSONBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", name, size, maxJSONBytes)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxJSONBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
	}
	return b, nil
}

// blob reads a small blob named by descriptor d and checks its digest.
func (img *pathImage) blob(d descriptor, v any) ([]byte, error) {
	hexd, ok := idHex(d.Digest)
	if !ok {
		return nil, fmt.Errorf("digest %q is not sha256", d.Digest)
	}
	b, err := img.readJSON("blobs/sha256/"+hexd, nil)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexd {
		return nil, fmt.Errorf("blob %s does not match its digest (corrupt)", d.Digest)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("blob %s: %v", d.Digest, err)
		}
	}
	return b, nil
}

// readLayout follows index.json to the one manifest ref picks.
func (img *pathImage) readLayout() error {
	var layout struct {
		Version string `json:"imageLayoutVersion"`
	}
	if _, err := img.readJSON("oci-layout", &layout); err != nil {
		return fmt.Errorf("not an OCI layout: %w", err)
	}
	if layout.Version != "1.0.0" {
		return fmt.Errorf("OCI layout version %q, want 1.0.0", layout.Version)
	}
	var idx index
	if _, err := img.readJSON("index.json", &idx); err != nil {
		return err
	}
	d, err := pickManifest(idx.Manifests, img.ref.Tag, true)
	if err != nil {
		return err
	}
	for range 4 { // an index may point at an index (one per platform)
		if d.MediaType != mediaOCIIndex && d.MediaType != mediaDockerList {
			break
		}
		var sub index
		if _, err := img.blob(d, &sub); err != nil {
			return err
		}
		if d, err = pickManifest(sub.Manifests, "", false); err != nil {
			return err
		}
	}
	if d.MediaType != mediaOCIManifest && d.MediaType != mediaDockerManifest {
		return fmt.Errorf("manifest %s has media type %q, not an image manifest", d.Digest, d.MediaType)
	}
	var m manifest
	if _, err := img.blob(d, &m); err != nil {
		return err
	}
	raw, err := img.blob(m.Config, nil)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	img.raw, img.id = raw, m.Config.Digest
	for _, l := range m.Layers {
		hexd, ok := idHex(l.Digest)
		if !ok {
			return fmt.Errorf("layer digest %q is not sha256", l.Digest)
		}
		if strings.Contains(l.MediaType, "zstd") {
			return fmt.Errorf("layer %s is zstd-compressed: only uncompressed and gzip layers are supported", l.Digest)
		}
		img.layers = append(img.layers, pathLayer{name: "blobs/sha256/" + hexd, digest: l.Digest, size: l.Size})
	}
	return nil
}

// pickManifest chooses among an index's manifests: the one whose ref
// name is tag, or the only one; below the top index, this platform's.
func pickManifest(ds []descriptor, tag string, top bool) (descriptor, error) {
	if !top {
		for _, d := range ds {
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
				return d, nil
			}
		}
		return descriptor{}, fmt.Errorf("no manifest for linux/%s in the index", runtime.GOARCH)
	}
	if tag != "" {
		var names []string
		for _, d := range ds {
			if d.Annotations[annotationRefName] == tag {
				return d, nil
			}
			if n := d.Annotations[annotationRefName]; n != "" {
				names = append(names, n)
			}
		}
		return descriptor{}, fmt.Errorf("no image tagged %q (tags: %s)", tag, strings.Join(names, ", "))
	}
	switch len(ds) {
	case 0:
		return descriptor{}, errors.New("index.json lists no image")
	case 1:
		return ds[0], nil
	}
	return descriptor{}, fmt.Errorf("index.json lists %d images: name one with :TAG", len(ds))
}

// readDockerArchive reads what `docker save` wrote: manifest.json names
// each image's config file, tags and layer files.
func (img *pathImage) readDockerArchive() error {
	var ms []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if _, err := img.readJSON("manifest.json", &ms); err != nil {
		return fmt.Errorf("not a docker-save archive: %w", err)
	}
	var pick int = -1
	switch {
	case img.ref.Tag != "":
		want := img.ref.Tag
		if n, err := normalizeName(want); err == nil {
			want = n
		}
		for i, m := range ms {
			for _, t := range m.RepoTags {
				if n, err := normalizeName(t); err == nil && n == want || t == img.ref.Tag {
					pick = i
				}
			}
		}
		if pick < 0 {
			return fmt.Errorf("no image tagged %q in the archive", img.ref.Tag)
		}
	case len(ms) == 1:
		pick = 0
	case len(ms) == 0:
		return errors.New("manifest.json lists no image")
	default:
		return fmt.Errorf("the archive holds %d images: name one with :NAME:TAG", len(ms))
	}
	m := ms[pick]
	raw, err := img.readJSON(m.Config, nil)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	sum := sha256.Sum256(raw)
	img.raw, img.id = raw, "sha256:"+hex.EncodeToString(sum[:])
	if hexd, ok := idHex("sha256:" + strings.TrimSuffix(path.Base(m.Config), ".json")); ok && "sha256:"+hexd != img.id {
		return fmt.Errorf("config %s does not match its name (corrupt)", m.Config)
	}
	for _, l := range m.Layers {
		r, size, err := img.store.open(l)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l, err)
		}
		r.Close()
		img.layers = append(img.layers, pathLayer{name: l, size: size})
	}
	return nil
}

// Config is the image's run configuration.
func (img *pathImage) Config() Config {
	c := img.config.Config
	return Config{Env: slices.Clone(c.Env), WorkingDir: c.WorkingDir, User: c.User}
}

// isGzip tells a gzip stream by its magic.
func isGzip(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }

// isZstd tells a zstd stream by its magic.
func isZstd(b []byte) bool { return bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) }
