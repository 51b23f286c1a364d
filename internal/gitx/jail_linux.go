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

// jailTools finds bubblewrap, which builds the jail, and git, which must
// live under /usr, the one system tree the jail holds.
var jailTools = sync.OnceValues(func() ([2]string, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return [2]string{}, fmt.Errorf("confining host-side git: bubblewrap (bwrap) is not installed: install the bubblewrap package: %w", errdefs.ErrUnavailable)
	}
	git, err := exec.LookPath("git")
	if err == nil {
		git, err = filepath.EvalSymlinks(git)
	}
	if err != nil {
		return [2]string{}, fmt.Errorf("confining host-side git: git not found: %w", errdefs.ErrUnavailable)
	}
	if !strings.HasPrefix(git, "/usr/") {
		return [2]string{}, fmt.Errorf("confining host-side git: git is %s, outside /usr, the only system tree a confined git sees: %w", git, errdefs.ErrUnavailable)
	}
	return [2]string{bwrap, git}, nil
})

// command is the bubblewrap command line that runs git with args inside j,
// in dir ("" for the root).
func (j *Jail) command(dir string, args []string) (string, []string, error) {
	tools, err := jailTools()
	if err != nil {
		return "", nil, err
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
	if dir == "" {
		dir = "/"
	}
	a = append(a, "--chdir", dir, "--", tools[1])
	return tools[0], append(a, args...), nil
}
