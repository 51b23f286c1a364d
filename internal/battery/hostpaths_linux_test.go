package battery

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/docker"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestHostPaths is SECURITY.md H45: nothing inside a sandbox reveals a
// host path. It reads what a sandboxed command can read about its mounts
// (/proc/self/mountinfo, mounts, mountstats, and the guest's when
// readable), its environment, the links of its /proc and a few error
// messages (its own, the guest's and the daemon's for a bad exec or a
// missing file), and looks for every host path the test knows: the data
// dir and the test's other temporary directories, the battery's assets
// (the guest binary, the local backend's images), the engine's data root,
// the default data dir and the repo this test runs from.
//
// One entry is let through, and logged: under runc the root file system
// is the engine's overlay of the image's layers, whose options name
// directories under the engine's data root (see the docker backend's
// package comment); no other needle may show there either.
func TestHostPaths(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		x := e.newBox(t, sandbox.Limits{})
		needles := hostPathNeedles(t, e)
		t.Logf("%s: host paths looked for: %q", e.name, needles)

		var seen []string
		add := func(what, text string) {
			seen = append(seen, "== "+what+"\n"+text)
		}
		script := `for f in /proc/self/mountinfo /proc/self/mounts /proc/self/mountstats /proc/1/mountinfo /proc/1/mounts /proc/self/maps /proc/self/cgroup /proc/1/cgroup /proc/self/cmdline /proc/1/cmdline; do
	echo "== $f"; cat "$f" 2>&1 | tr '\0' ' '; echo
done
echo "== environment"; env; cat /proc/self/environ 2>&1 | tr '\0' '\n'
echo "== links"; for l in /proc/self/exe /proc/self/cwd /proc/self/root /proc/1/exe /proc/1/cwd /proc/1/root /proc/self/fd/*; do echo "$l -> $(readlink "$l" 2>&1)"; done
echo "== errors"; cat /workspace/no-such-file; cd /no-such-dir; ls /no-such-dir; /workspace/no-such-program; ls /run/agentbox-guest/x; touch /run/agentbox/x
`
		_, out, errOut := x.sh(t, script)
		add("sandbox stdout", out)
		add("sandbox stderr", errOut)
		// mountinfo is the heart of it: printed whole, so a failure shows
		// what is left.
		t.Logf("%s: /proc/self/mountinfo inside:\n%s", e.name, section(out, "/proc/self/mountinfo"))

		// The guest's and the daemon's refusals, as the caller sees them.
		for _, req := range []guest.ExecRequest{
			{Argv: []string{"/no-such-program"}},
			{Argv: []string{"no-such-program"}},
			{Argv: []string{"true"}, Dir: "/no-such-dir"},
			{Argv: []string{sandbox.GuestPath}},
			{Argv: []string{sandbox.WorkspaceDir}},
		} {
			req.Env, req.Timeout = defaultEnv, 30*time.Second
			var o, eo syncBuffer
			res, err := e.m.Exec(t.Context(), x.ws.ID, req, nil, &o, &eo)
			add("exec "+strings.Join(req.Argv, " ")+" in "+req.Dir, fmt.Sprintf("%s\n%+v\n%s%s", fmtErr(err), res.ExecResult, o.String(), eo.String()))
		}
		if fs, release, err := e.m.Files(t.Context(), x.ws.ID, false); err != nil {
			t.Errorf("opening the workspace's files: %v", err)
		} else {
			_, err := fs.Read(t.Context(), "no-such-dir/file", io.Discard)
			add("file API read of a missing file", fmtErr(err))
			_, err = fs.Stat(t.Context(), "../../etc/passwd")
			add("file API stat outside", fmtErr(err))
			release()
		}
		all := strings.Join(seen, "\n")
		engineRoot := engineDataRoot()
		residual := false
		for _, line := range strings.Split(all, "\n") {
			// The one entry nothing here can change: runc's root file
			// system, the engine's overlay of the image's layers, named by
			// the engine's own paths (see the docker backend's package
			// comment). Only the engine's data root may show there.
			engineOwn := e.name == docker.NameDocker && isRootOverlay(line)
			var found []string
			for _, n := range needles {
				if strings.Contains(line, n) && !(engineOwn && underAny(n, engineRoot, "/var/lib/docker")) {
					found = append(found, n)
				}
			}
			for _, l := range overlayLayers(line) {
				if l != "/" && strings.HasPrefix(l, "/") && !(engineOwn && underAny(l, engineRoot)) {
					found = append(found, "overlay layer "+l)
				}
			}
			if len(found) > 0 {
				t.Errorf("%s: host paths %q show inside: %s", e.name, found, line)
			}
			residual = residual || engineOwn && strings.Contains(line, engineRoot)
		}
		if residual {
			t.Logf("%s: residual: the root file system's entry names the engine's layers under %s", e.name, engineRoot)
		}
		if t.Failed() {
			t.Logf("%s: everything read:\n%s", e.name, tail(all, 30000))
		}
	})
}

// isRootOverlay says whether line is the entry of an overlay mounted at /
// in mountinfo or mounts.
func isRootOverlay(line string) bool {
	f := strings.Fields(line)
	if i := slices.Index(f, "-"); i >= 5 && i+1 < len(f) {
		return f[4] == "/" && f[i+1] == "overlay"
	}
	return len(f) >= 3 && f[1] == "/" && f[2] == "overlay"
}

// overlayLayers returns the layers an overlay entry names (lowerdir,
// upperdir, workdir, datadir), or nothing.
func overlayLayers(line string) []string {
	var out []string
	for _, field := range strings.Fields(line) {
		for _, opt := range strings.Split(field, ",") {
			k, v, ok := strings.Cut(opt, "=")
			switch strings.TrimSuffix(k, "+") {
			case "lowerdir", "upperdir", "workdir", "datadir":
				if ok {
					out = append(out, strings.Split(v, ":")...)
				}
			}
		}
	}
	return out
}

// underAny says whether p is one of dirs or below one.
func underAny(p string, dirs ...string) bool {
	for _, d := range dirs {
		if d != "" && (p == d || strings.HasPrefix(p, d+"/")) {
			return true
		}
	}
	return false
}

// engineDataRoot is the Docker engine's data root.
func engineDataRoot() string {
	out, err := exec.Command("docker", "info", "--format", "{{.DockerRootDir}}").Output()
	if err != nil {
		return "/var/lib/docker"
	}
	return strings.TrimSpace(string(out))
}

// hostPathNeedles are the host paths no sandbox of e may see.
func hostPathNeedles(t *testing.T, e *env) []string {
	t.Helper()
	// The data dir is a t.TempDir: its parent holds every temporary
	// directory of this subtest (the source repo's among them).
	needles := []string{filepath.Dir(e.data), e.data, assets, guestBin, imagesDir, "/var/lib/agentbox", "/var/lib/docker", engineDataRoot()}
	if wd, err := os.Getwd(); err == nil {
		// The repo's root: the package directory's grandparent's parent.
		needles = append(needles, filepath.Dir(filepath.Dir(wd)))
	}
	if exe, err := os.Executable(); err == nil {
		needles = append(needles, filepath.Dir(exe))
	}
	// Resolved forms too: a path reached through a symlink shows resolved.
	for _, n := range needles {
		if r, err := filepath.EvalSymlinks(n); err == nil && r != n {
			needles = append(needles, r)
		}
	}
	var out []string
	for _, n := range needles {
		if n != "" && n != "/" && n != "/tmp" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// section returns the part of out under the "== name" line.
func section(out, name string) string {
	_, rest, ok := strings.Cut(out, "== "+name+"\n")
	if !ok {
		return ""
	}
	s, _, _ := strings.Cut(rest, "\n== ")
	return s
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
