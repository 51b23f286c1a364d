package local

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/image"
)

// The local backend runs an image from one of two places. A root file
// system that `agentbox image build` unpacked into ImagesDir (busybox,
// debian) runs as it is, with the config of the images it builds; this is
// what hosts without a container engine have. Any other image the engine
// has (built from a Dockerfile, with --packages, or brought by the user)
// is unpacked on first use into ImageCache, keyed by its engine id, with
// its ENV, WORKDIR and USER kept beside it (see image.Unpack).

// knownKinds are the images `agentbox image build` makes.
var knownKinds = []image.Kind{image.KindBusybox, image.KindDebian}

// rootfsName matches the name of an unpacked root file system under
// ImagesDir: one path component, no dots at the start.
var rootfsName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// imageRootfs maps a spec's image to its unpacked root file system:
// "agentbox/busybox:latest" and "busybox" are imagesDir/busybox/rootfs,
// "agentbox/debian:bookworm" and "debian" imagesDir/debian/rootfs; any
// other plain name N is imagesDir/N/rootfs. It does not look at the disk.
func imageRootfs(imagesDir, name string) (kind, dir string, err error) {
	n := strings.TrimPrefix(name, "agentbox/")
	repo, _, tagged := strings.Cut(n, ":")
	for _, k := range knownKinds {
		if repo != string(k) {
			continue
		}
		if tagged && "agentbox/"+n != image.DefaultName(k) {
			return "", "", errdefs.Invalid("image %q: the local backend has only %s", name, image.DefaultName(k))
		}
		return repo, filepath.Join(imagesDir, repo, "rootfs"), nil
	}
	if tagged || !rootfsName.MatchString(repo) {
		return "", "", errdefs.Invalid("image %q: the local backend runs unpacked root file systems by name (%s)", name, kindList())
	}
	return repo, filepath.Join(imagesDir, repo, "rootfs"), nil
}

// buildHint tells how to make the root file system of kind.
func buildHint(kind string) string {
	for _, k := range knownKinds {
		if kind == string(k) {
			return fmt.Sprintf(`build it with "agentbox image build --kind %s"`, k)
		}
	}
	return fmt.Sprintf(`"agentbox image build --kind K" builds %s`, kindList())
}

func kindList() string {
	var s []string
	for _, k := range knownKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
