package envdfs

import (
	"fmt"
	"path"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// workspaceDir is where every sandbox mounts its workspace
// (sandbox.WorkspaceDir, which a surface does not import; a test pins it).
const workspaceDir = "/workspace"

// spath is a client path mapped onto the workspace.
type spath struct {
	// root is the sandbox path of the workspace root as the client named
	// it: /workspace or the home it aliases.
	root string
	// rel is the path below the workspace root, in fileapi's form ("."
	// for the root itself). fileapi validates it again.
	rel string
}

// abs is the path as the sandbox sees it.
func (p spath) abs() string { return p.sandboxPath(p.rel) }

// sandboxPath names a workspace-relative path under p's root.
func (p spath) sandboxPath(rel string) string { return path.Join(p.root, rel) }

// maxClientPath bounds a client path before any work is done on it.
const maxClientPath = 4096

// resolvePath maps the client path p (absolute, relative to the home, or
// "~"-prefixed) onto the workspace, or refuses it with ErrInvalid when it
// lands outside (see the package comment).
func (t Target) resolvePath(p string) (spath, error) {
	if len(p) > maxClientPath {
		return spath{}, errdefs.Invalid("path of %d bytes is longer than %d", len(p), maxClientPath)
	}
	if strings.ContainsRune(p, 0) {
		return spath{}, errdefs.Invalid("path %q contains a NUL byte", p)
	}
	home := t.home()
	switch {
	case p == "" || p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = home + "/" + p
	}
	clean := path.Clean(p)
	for _, root := range t.roots() {
		if clean == root {
			return spath{root: root, rel: "."}, nil
		}
		if strings.HasPrefix(clean, root+"/") {
			return spath{root: root, rel: clean[len(root)+1:]}, nil
		}
	}
	return spath{}, fmt.Errorf("path %s is outside the sandbox's workspace: the E2B file API reaches only %s: %w",
		quote(clean), strings.Join(t.roots(), " and "), errdefs.ErrInvalid)
}

// home is Target.Home, cleaned; the workspace when none is set or it is
// not absolute.
func (t Target) home() string {
	if !strings.HasPrefix(t.Home, "/") {
		return workspaceDir
	}
	return path.Clean(t.Home)
}

// roots are the sandbox paths that name the workspace root: /workspace,
// and the home when it lies outside /workspace (and is not "/", which
// would alias the whole file system).
func (t Target) roots() []string {
	ws := workspaceDir
	h := t.home()
	if h == "/" || h == ws || strings.HasPrefix(h, ws+"/") || strings.HasPrefix(ws, h+"/") {
		return []string{ws}
	}
	return []string{ws, h}
}

// quote shows a client path in an error without echoing kilobytes of it.
func quote(p string) string {
	const show = 128
	if len(p) > show {
		return fmt.Sprintf("%q... (%d bytes)", p[:show], len(p))
	}
	return fmt.Sprintf("%q", p)
}
