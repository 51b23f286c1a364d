// Package image builds the root file systems that sandboxes run in, without
// any container registry: a tiny busybox image (from the host's Debian
// busybox-static) for tests, and a Debian image (debootstrap) for real work.
//
// A build produces the same tree twice: imported into the Docker engine as an
// image (for the docker and gvisor backends) and unpacked in a directory (for
// the local backend, which bind-mounts it read-only as the sandbox root).
// Images carry agentbox.image.* labels; the recipe label is a hash of every
// input that decides the content, so that building an unchanged recipe again
// does nothing.
package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Kind names a build recipe.
type Kind string

// The recipes.
const (
	// KindBusybox is a static busybox with its applets, for tests: it builds
	// in about a second and holds nothing but a shell and coreutils.
	KindBusybox Kind = "busybox"
	// KindDebian is a minimal Debian bookworm with git, python3, pytest, make
	// and gcc, for real work.
	KindDebian Kind = "debian"
)

// Labels set on every image this package imports.
const (
	LabelKind   = "agentbox.image.kind"
	LabelRecipe = "agentbox.image.recipe"
	LabelUID    = "agentbox.image.uid"
	LabelGID    = "agentbox.image.gid"
	// LabelPackages lists a Debian image's extra packages, comma-separated.
	LabelPackages = "agentbox.image.packages"
)

// The sandbox user inside every image.
const (
	DefaultUID = 1000
	DefaultGID = 1000
	UserName   = "agent"
	UserHome   = "/home/agent"
)

// nobody is the uid of nobody (and gid of nogroup) in both bases.
const nobody = 65534

// WorkspaceDir is where backends mount the workspace; images create it empty.
const WorkspaceDir = "/workspace"

// ReleaseFile describes the image from inside (KIND=, RECIPE=, UID=, GID=),
// so that an unpacked root file system can be checked against a recipe
// without the engine.
const ReleaseFile = "/etc/agentbox-release"

// DefaultCache is where Unpack keeps images unpacked by id, shared by every data dir on
// the machine (an id names one content, so sharing is safe).
const DefaultCache = "/var/cache/agentbox/images"

// DefaultMirror is used when the host's apt sources name no Debian mirror.
const DefaultMirror = "http://deb.debian.org/debian"

// pathEnv is the PATH set in the image config.
const pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// recipeVersion changes whenever the build steps change in a way that
// changes the produced tree, so that old images are rebuilt.
const recipeVersion = 1

// The Debian recipe.
var (
	debianSuite   = "bookworm"
	debianVariant = "minbase"
	debianInclude = []string{
		"git", "python3", "python3-pytest", "make", "gcc", "libc6-dev",
		"ca-certificates", "procps",
	}
)

// BuildOptions says what to build and where.
type BuildOptions struct {
	// Kind is the recipe: KindBusybox or KindDebian.
	Kind Kind
	// Name is the image reference to create; default
	// "agentbox/busybox:latest" or "agentbox/debian:bookworm".
	Name string
	// RootfsDir is where the root file system is unpacked for the local
	// (bubblewrap) backend, e.g. DATA/images/<kind>/rootfs. Empty: engine only.
	RootfsDir string
	// CacheDir keeps the debootstrap result between builds so that a rebuild
	// (another uid, a lost image) skips the download. Default: a "cache"
	// directory next to RootfsDir; empty RootfsDir: no cache.
	CacheDir string
	// UID and GID of the sandbox user "agent" (home /home/agent); default
	// 1000:1000. Root is not allowed.
	UID, GID int
	// Packages are Debian packages to add to KindDebian's own (golang-go,
	// nodejs, npm, ...), with their dependencies. They change the recipe, so
	// the default Name becomes "agentbox/debian:bookworm-" and a hash of
	// the list, and the debootstrap result is cached apart.
	Packages []string
	// Mirror is the Debian mirror for debootstrap; default DetectMirror().
	Mirror string
	// NoEngine builds only the root file system at RootfsDir, for hosts
	// where no container engine runs. Without it an unreachable engine is an
	// error.
	NoEngine bool
	// Force rebuilds even when the image and root file system already match
	// the recipe. The debootstrap cache is still used.
	Force bool
	// Progress receives human-readable progress lines; nil discards them.
	Progress io.Writer
}

// Image is a built or listed image.
type Image struct {
	// Name is the image reference, e.g. "agentbox/busybox:latest".
	Name string `json:"name"`
	// ID is the engine's image id ("sha256:..."); empty for a NoEngine build.
	ID string `json:"id"`
	// Kind is the recipe it was built from.
	Kind Kind `json:"kind"`
	// Rootfs is the unpacked root file system for the local backend. Build
	// fills it in; List cannot (the engine does not know the caller's data
	// directory) and leaves it empty.
	Rootfs string `json:"rootfs"`
	// SizeBytes is the image size in the engine, or the size of Rootfs.
	SizeBytes int64 `json:"size_bytes"`
	// Created is when the image was imported (or the rootfs built).
	Created time.Time `json:"created"`
	// UID and GID of the sandbox user inside the image.
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// DefaultName returns the image reference built for kind when none is given.
func DefaultName(kind Kind) string {
	switch kind {
	case KindBusybox:
		return "agentbox/busybox:latest"
	case KindDebian:
		return "agentbox/debian:" + debianSuite
	}
	return ""
}

// withDefaults validates o and fills in the defaults. Errors are ErrInvalid
// and change nothing.
func (o BuildOptions) withDefaults() (BuildOptions, error) {
	switch o.Kind {
	case KindBusybox, KindDebian:
	case "":
		return o, errdefs.Invalid("building image: no kind given (want %q or %q)", KindBusybox, KindDebian)
	default:
		return o, errdefs.Invalid("building image: unknown kind %q (want %q or %q)", o.Kind, KindBusybox, KindDebian)
	}
	if len(o.Packages) > 0 {
		if o.Kind != KindDebian {
			return o, errdefs.Invalid("building image: packages %v: only a %s image takes extra packages", o.Packages, KindDebian)
		}
		pkgs, err := extraPackages(o.Packages)
		if err != nil {
			return o, err
		}
		o.Packages = pkgs
	}
	if o.Name == "" {
		o.Name = DefaultName(o.Kind)
		if len(o.Packages) > 0 {
			o.Name += "-" + hashJSON(o.Packages)[:12]
		}
	}
	name, err := normalizeName(o.Name)
	if err != nil {
		return o, err
	}
	o.Name = name
	if o.UID == 0 {
		o.UID = DefaultUID
	}
	if o.GID == 0 {
		o.GID = DefaultGID
	}
	// 65534 is nobody/nogroup in both images; uids above 2^31-2 are not
	// representable everywhere (and -1 means "no change" to chown).
	for _, id := range []struct {
		what string
		v    int
	}{{"uid", o.UID}, {"gid", o.GID}} {
		if id.v < 1 || id.v > 1<<31-2 {
			return o, errdefs.Invalid("building image %s: %s %d out of range (1..%d; the sandbox user is never root)", o.Name, id.what, id.v, 1<<31-2)
		}
	}
	if o.UID == nobody {
		return o, errdefs.Invalid("building image %s: uid %d is nobody's", o.Name, o.UID)
	}
	if o.RootfsDir != "" {
		if !filepath.IsAbs(o.RootfsDir) {
			abs, err := filepath.Abs(o.RootfsDir)
			if err != nil {
				return o, errdefs.Invalid("building image %s: rootfs dir %q: %v", o.Name, o.RootfsDir, err)
			}
			o.RootfsDir = abs
		}
		o.RootfsDir = filepath.Clean(o.RootfsDir)
		if o.RootfsDir == "/" {
			return o, errdefs.Invalid("building image %s: rootfs dir cannot be /", o.Name)
		}
		if o.CacheDir == "" {
			o.CacheDir = filepath.Join(filepath.Dir(o.RootfsDir), "cache")
		}
	}
	if o.CacheDir != "" {
		abs, err := filepath.Abs(o.CacheDir)
		if err != nil {
			return o, errdefs.Invalid("building image %s: cache dir %q: %v", o.Name, o.CacheDir, err)
		}
		o.CacheDir = abs
	}
	if o.NoEngine && o.RootfsDir == "" {
		return o, errdefs.Invalid("building image %s: nothing to build: no engine and no rootfs dir", o.Name)
	}
	if o.Kind == KindDebian && o.Mirror == "" {
		o.Mirror = DetectMirror()
	}
	if o.Mirror != "" {
		if err := checkMirror(o.Mirror); err != nil {
			return o, errdefs.Invalid("building image %s: mirror %q: %v", o.Name, o.Mirror, err)
		}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o, nil
}

// debianPackage matches a Debian package name (Debian Policy 5.6.1).
var debianPackage = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

// extraPackages validates extra Debian packages and returns them sorted,
// without duplicates and without those the Debian recipe has anyway.
func extraPackages(pkgs []string) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !debianPackage.MatchString(p) {
			return nil, errdefs.Invalid("building image: package %q is not a Debian package name", p)
		}
		if !slices.Contains(debianInclude, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// normalizeName parses an image reference to create and returns it in the
// short form the engine lists ("agentbox/busybox:latest").
func normalizeName(name string) (string, error) {
	ref, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", errdefs.Invalid("image name %q: %v", name, err)
	}
	if _, ok := ref.(reference.Digested); ok {
		return "", errdefs.Invalid("image name %q: a built image cannot be named by digest", name)
	}
	return reference.FamiliarString(reference.TagNameOnly(ref)), nil
}

// recipe is every input that decides the content of an image. Its hash is
// the recipe label; the mirror is left out on purpose: the same suite from
// another mirror is the same recipe.
type recipe struct {
	Version int  `json:"version"`
	Kind    Kind `json:"kind"`
	UID     int  `json:"uid"`
	GID     int  `json:"gid"`
	// Busybox is the sha256 of the busybox binary (which decides the applets).
	Busybox string             `json:"busybox,omitempty"`
	Debian  *debootstrapRecipe `json:"debian,omitempty"`
}

// debootstrapRecipe is what decides the cached debootstrap result.
type debootstrapRecipe struct {
	Suite   string   `json:"suite"`
	Variant string   `json:"variant"`
	Include []string `json:"include"`
	Version int      `json:"version"`
	// Extra are packages apt installs over the debootstrap result:
	// debootstrap's own resolver cannot install some (npm's dependencies
	// fail to configure in its order).
	Extra []string `json:"extra,omitempty"`
}

// newDebootstrapRecipe is the Debian recipe with extra packages (sorted,
// validated) after its own.
func newDebootstrapRecipe(extra []string) *debootstrapRecipe {
	return &debootstrapRecipe{
		Suite:   debianSuite,
		Variant: debianVariant,
		Include: append([]string(nil), debianInclude...),
		Version: recipeVersion,
		Extra:   append([]string(nil), extra...),
	}
}

// hashJSON returns the hex sha256 of v's JSON encoding.
func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("image: hashing %T: %v", v, err)) // plain structs always marshal
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Hash is the value of the recipe label.
func (r recipe) Hash() string { return hashJSON(r) }

// cacheKey names the cached debootstrap result: the recipe, where it came
// from, and for which architecture.
func (d *debootstrapRecipe) cacheKey(mirror, arch string) string {
	return hashJSON(struct {
		R      *debootstrapRecipe
		Mirror string
		Arch   string
	}{d, mirror, arch})[:16]
}

// release is the content of ReleaseFile.
func (r recipe) release() string {
	return fmt.Sprintf("KIND=%s\nRECIPE=%s\nUID=%d\nGID=%d\n", r.Kind, r.Hash(), r.UID, r.GID)
}
