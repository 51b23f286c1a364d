package image

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentbox/agentbox/internal/mountinfo"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }

func statT(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// entry is one thing to create in a root file system.
type entry struct {
	path     string // relative to the root
	mode     fs.FileMode
	uid, gid int
	link     string // symlink target
	data     string // file content
	dir      bool
}

// create makes e under root. Modes are set explicitly: the umask must not
// decide what a sandbox may write.
func (e entry) create(root string) error {
	p := filepath.Join(root, e.path)
	switch {
	case e.link != "":
		if err := os.Symlink(e.link, p); err != nil {
			return err
		}
		return os.Lchown(p, e.uid, e.gid)
	case e.dir:
		if err := os.Mkdir(p, e.mode.Perm()); err != nil && !os.IsExist(err) {
			return err
		}
	default:
		if err := os.WriteFile(p, []byte(e.data), e.mode.Perm()); err != nil {
			return err
		}
	}
	if err := os.Chown(p, e.uid, e.gid); err != nil {
		return err
	}
	return os.Chmod(p, e.mode)
}

func createAll(root string, entries []entry) error {
	for _, e := range entries {
		if err := e.create(root); err != nil {
			return fmt.Errorf("creating %s in %s: %w", e.path, root, err)
		}
	}
	return nil
}

// commonEntries are what every image gets on top of its base: the
// workspace mount point owned by the sandbox user and the release file.
func commonEntries(o BuildOptions, r recipe) []entry {
	return []entry{
		{path: "workspace", dir: true, mode: 0o755, uid: o.UID, gid: o.GID},
		{path: strings.TrimPrefix(ReleaseFile, "/"), mode: 0o644, data: r.release()},
	}
}

// addUser adds the sandbox user "agent" with o.UID and o.GID to the passwd
// and group files under root (and shadow files if the base has them), and
// creates its home from /etc/skel. A uid or user name the base already uses
// is refused; a gid it already uses becomes the user's primary group.
func addUser(root, kind string, o BuildOptions, shell string) error {
	passwd, err := readColonFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return err
	}
	for _, f := range passwd {
		if len(f) > 2 && f[0] == UserName {
			return errdefs.Invalid("user %s already exists in the %s base", UserName, kind)
		}
		if len(f) > 2 && f[2] == strconv.Itoa(o.UID) {
			return errdefs.Invalid("uid %d is taken by %q in the %s base", o.UID, f[0], kind)
		}
	}
	group, err := readColonFile(filepath.Join(root, "etc/group"))
	if err != nil {
		return err
	}
	newGroup := true
	for _, f := range group {
		if len(f) > 2 && f[2] == strconv.Itoa(o.GID) {
			newGroup = false
		}
		if len(f) > 2 && f[0] == UserName && f[2] != strconv.Itoa(o.GID) {
			return errdefs.Invalid("group %s already exists in the %s base with gid %s", UserName, kind, f[2])
		}
	}
	appends := map[string]string{
		"etc/passwd": fmt.Sprintf("%s:x:%d:%d:agentbox sandbox user:%s:%s\n", UserName, o.UID, o.GID, UserHome, shell),
		"etc/shadow": UserName + ":!::0:99999:7:::\n",
	}
	if newGroup {
		appends["etc/group"] = fmt.Sprintf("%s:x:%d:\n", UserName, o.GID)
		appends["etc/gshadow"] = UserName + ":!::\n"
	}
	for name, line := range appends {
		p := filepath.Join(root, name)
		if _, err := os.Stat(p); err != nil && (name == "etc/shadow" || name == "etc/gshadow") {
			continue // a base without shadow files gets none
		}
		if err := appendLine(p, line); err != nil {
			return err
		}
	}
	home := filepath.Join(root, UserHome)
	if err := os.MkdirAll(filepath.Dir(home), 0o755); err != nil {
		return err
	}
	if err := (entry{path: UserHome, dir: true, mode: 0o755, uid: o.UID, gid: o.GID}).create(root); err != nil {
		return fmt.Errorf("creating %s: %w", UserHome, err)
	}
	skel, _ := os.ReadDir(filepath.Join(root, "etc/skel"))
	for _, s := range skel {
		if !s.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, "etc/skel", s.Name()))
		if err != nil {
			return err
		}
		e := entry{path: filepath.Join(UserHome, s.Name()), mode: 0o644, uid: o.UID, gid: o.GID, data: string(b)}
		if err := e.create(root); err != nil {
			return fmt.Errorf("creating %s: %w", e.path, err)
		}
	}
	return nil
}

func readColonFile(p string) ([][]string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, strings.Split(l, ":"))
		}
	}
	return out, nil
}

// appendLine appends line to p, first ending p's last line if it is not.
func appendLine(p, line string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir) }

// removeTree deletes dir, but never through a mount: a debootstrap that was
// killed may leave /proc or a bind-mounted /dev inside the target, and
// deleting through those would delete the host's. Leftover mounts are
// detached first; if one stays, nothing is deleted.
func removeTree(dir string) error {
	if dir == "" {
		return nil
	}
	dir = filepath.Clean(dir)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	} else if os.IsNotExist(err) {
		return nil
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return fmt.Errorf("removing %s: reading mounts: %w", dir, err)
	}
	for _, m := range mounts {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	if mounts, err = mountsUnder(dir); err != nil || len(mounts) > 0 {
		return fmt.Errorf("not removing %s: %s is still mounted", dir, strings.Join(mounts, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
