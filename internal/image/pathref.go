package image

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Transports of an image named by path, spelled as skopeo spells them, so
// that an image reference such as "oci:/srv/images/app:v1" means here what
// it means to skopeo and podman.
const (
	// TransportOCI is an OCI image layout directory: oci:/path[:tag].
	TransportOCI = "oci"
	// TransportOCIArchive is a tar of an OCI image layout:
	// oci-archive:/path/file.tar[:tag].
	TransportOCIArchive = "oci-archive"
	// TransportDockerArchive is what `docker save` writes:
	// docker-archive:/path/file.tar[:name:tag].
	TransportDockerArchive = "docker-archive"
)

// PathRef is an image named by a path on the daemon's host instead of by
// a name in the engine.
type PathRef struct {
	// Transport is TransportOCI, TransportOCIArchive or TransportDockerArchive.
	Transport string
	// Path is the layout directory or archive, absolute and clean.
	Path string
	// Tag picks one image of several: an OCI ref name annotation
	// (org.opencontainers.image.ref.name), or one of a docker archive's
	// RepoTags. Empty: the layout or archive must hold exactly one image.
	Tag string
}

// String is the reference as the caller spells it.
func (r PathRef) String() string {
	s := r.Transport + ":" + r.Path
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	return s
}

// IsPathRef reports whether ref names an image by path (has a transport
// prefix), whether or not the rest of it is valid.
func IsPathRef(ref string) bool {
	for _, t := range []string{TransportOCI, TransportOCIArchive, TransportDockerArchive} {
		if strings.HasPrefix(ref, t+":") {
			return true
		}
	}
	return false
}

// ParsePathRef parses "transport:/path[:tag]". The path must be absolute.
// A colon after the path starts the tag, unless the whole rest names an
// existing file (a path may hold colons). Errors are ErrInvalid.
func ParsePathRef(ref string) (PathRef, error) {
	transport, rest, ok := strings.Cut(ref, ":")
	if !ok || !IsPathRef(ref) {
		return PathRef{}, errdefs.Invalid("image %q: not an image path (want oci:PATH[:TAG], oci-archive:PATH[:TAG] or docker-archive:PATH[:NAME:TAG])", ref)
	}
	if strings.IndexByte(rest, 0) >= 0 {
		return PathRef{}, errdefs.Invalid("image %q: the path holds a NUL byte", ref)
	}
	p, tag := rest, ""
	if _, err := os.Lstat(rest); err != nil {
		// docker-archive's reference is NAME:TAG, itself with a colon:
		// the path ends at the first colon after its last slash.
		slash := strings.LastIndexByte(rest, '/')
		if i := strings.IndexByte(rest[slash+1:], ':'); i >= 0 {
			p, tag = rest[:slash+1+i], rest[slash+1+i+1:]
		}
		if transport != TransportDockerArchive && strings.Contains(tag, ":") {
			return PathRef{}, errdefs.Invalid("image %q: tag %q holds a colon", ref, tag)
		}
	}
	if p == "" || !filepath.IsAbs(p) {
		return PathRef{}, errdefs.Invalid("image %q: the path %q is not absolute (the daemon resolves it on its own host)", ref, p)
	}
	if tag == "" && strings.HasSuffix(rest, ":") {
		return PathRef{}, errdefs.Invalid("image %q: empty tag", ref)
	}
	return PathRef{Transport: transport, Path: filepath.Clean(p), Tag: tag}, nil
}
