package gitx

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// jailBase is what every jail shares, found once: bubblewrap, which
// builds it; git, which must live under /usr, the one system tree the jail
// holds; and the arguments that make the jail's root.
type jailBase struct {
	bwrap, git string
	args       []string
}

var jailTools = sync.OnceValues(func() (jailBase, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return jailBase{}, fmt.Errorf("confining host-side git: bubblewrap (bwrap) is not installed: install the bubblewrap package: %w", errdefs.ErrUnavailable)
	}
	git, err := exec.LookPath("git")
	if err == nil {
		git, err = filepath.EvalSymlinks(git)
	}
	if err != nil {
		return jailBase{}, fmt.Errorf("confining host-side git: git not found: %w", errdefs.ErrUnavailable)
	}
	if !strings.HasPrefix(git, "/usr/") {
		return jailBase{}, fmt.Errorf("confining host-side git: git is %s, outside /usr, the only system tree a confined git sees: %w", git, errdefs.ErrUnavailable)
	}
	a := []string{
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL", "--cap-add", "CAP_DAC_READ_SEARCH",
		"--ro-bind", "/usr", "/usr",
	}
	// The top-level links of a merged-/usr system (/bin -> usr/bin, ...),
	// so that the dynamic loader and libraries are where git expects them.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if t, err := os.Readlink(d); err == nil && strings.HasPrefix(filepath.Clean(filepath.Join("/", t)), "/usr/") {
			a = append(a, "--symlink", t, d)
		}
	}
	// git makes its temporary files' names from /dev/urandom.
	a = append(a, "--dev-bind", "/dev/null", "/dev/null", "--dev-bind", "/dev/urandom", "/dev/urandom", "--tmpfs", "/tmp")
	return jailBase{bwrap: bwrap, git: git, args: a}, nil
})

// netFiles are what name resolution and TLS verification read.
var netFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf"}

// command is the bubblewrap command line that runs git with args inside j,
// in dir ("" for the root).
func (j *Jail) command(dir string, args []string) (string, []string, error) {
	base, err := jailTools()
	if err != nil {
		return "", nil, err
	}
	a := slices.Clone(base.args)
	type bind struct {
		path string
		rw   bool
	}
	var binds []bind
	for _, p := range j.ReadOnly {
		binds = append(binds, bind{filepath.Clean(p), false})
	}
	for _, p := range j.Writable {
		binds = append(binds, bind{filepath.Clean(p), true})
	}
	// A parent before what lies inside it, or it would cover it.
	slices.SortStableFunc(binds, func(x, y bind) int { return len(x.path) - len(y.path) })
	for _, b := range binds {
		if !filepath.IsAbs(b.path) || b.path == "/" || b.path == "/usr" || strings.HasPrefix(b.path, "/usr/") || b.path == "/dev" || strings.HasPrefix(b.path, "/dev/") {
			return "", nil, fmt.Errorf("confining host-side git: %q cannot be put in the jail", b.path)
		}
		flag := "--ro-bind"
		if b.rw {
			flag = "--bind"
		}
		a = append(a, flag, b.path, b.path)
	}
	if j.Network {
		for _, p := range netFiles {
			a = append(a, "--ro-bind-try", p, p)
		}
	}
	if dir == "" {
		dir = "/"
	}
	a = append(a, "--chdir", dir, "--", base.git)
	return base.bwrap, append(a, args...), nil
}
