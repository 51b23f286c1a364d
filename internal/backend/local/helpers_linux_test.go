package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
)

const (
	testUID = 1000
	testGID = 1000
)

// newBackend returns a backend with its own state dir and cgroup parent,
// closed (and its cgroup parent removed) when the test ends.
func newBackend(t *testing.T) *Backend {
	t.Helper()
	requireJails(t)
	return newBackendWith(t, Options{
		StateDir:     filepath.Join(t.TempDir(), "state"),
		ImagesDir:    imagesDir,
		CgroupParent: "agentbox-test-" + randHex(4),
	})
}

// newBackendWith returns a backend made with opts, closed (and its cgroup
// parent removed) when the test ends.
func newBackendWith(t *testing.T, opts Options) *Backend {
	t.Helper()
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the backend: %v", err)
		}
		for _, h := range b.cg.hiers {
			os.Remove(filepath.Join(h, b.cg.parent))
		}
		if b.cg.version == cgroupV2 {
			os.Remove(filepath.Join(b.cg.root, b.cg.parent))
		}
	})
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// box is a running sandbox with its guest connected, as the daemon would
// hold it.
type box struct {
	b      *Backend
	id     string
	files  string // the workspace on the host
	runDir string
	ln     *guest.Listener
	conn   *guest.Conn
	info   sandbox.Info
	rec    *record
}

// boxRequest is a create request for a fresh workspace and run dir.
func boxRequest(t *testing.T, spec sandbox.Spec) (sandbox.CreateRequest, *guest.Listener) {
	t.Helper()
	id := ids.New("sb")
	root := t.TempDir() // 0700: only staging makes what is below reachable
	files := filepath.Join(root, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(files, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	// A unix socket path must fit 108 bytes: t.TempDir() paths may not.
	run, err := os.MkdirTemp("", "abl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	os.Chmod(run, 0o755)
	token, err := guest.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := guest.Listen(filepath.Join(run, "agentbox.sock"), token, guest.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if spec.Image == "" {
		spec.Image = "agentbox/busybox:latest"
	}
	spec.Backend = Name
	req := sandbox.CreateRequest{
		ID: id, WorkspaceID: "ws_" + randHex(6), Files: files, RunDir: run,
		Guest: guestBin, GuestEnv: []string{guest.TokenEnv + "=" + token},
		UID: testUID, GID: testGID, Spec: spec,
	}
	return req, ln
}

// startBox creates a sandbox and waits for its guest.
func startBox(t *testing.T, b *Backend, spec sandbox.Spec) *box {
	t.Helper()
	req, ln := boxRequest(t, spec)
	info, err := b.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	x := &box{b: b, id: req.ID, files: req.Files, runDir: req.RunDir, ln: ln, info: info}
	t.Cleanup(func() {
		if x.conn != nil {
			x.conn.Close()
		}
		if err := b.Remove(context.Background(), x.id); err != nil {
			t.Errorf("remove: %v", err)
		}
		if t.Failed() {
			t.Logf("guest log of %s:\n%s", x.id, b.GuestLog(x.id))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	x.conn, err = ln.Accept(ctx)
	if err != nil {
		t.Fatalf("guest did not connect: %v\nlog:\n%s", err, b.GuestLog(x.id))
	}
	if x.rec, err = b.lookup(x.id); err != nil {
		t.Fatal(err)
	}
	return x
}

var shEnv = []string{"PATH=/bin", "HOME=/home/agent"}

// run execs argv in the sandbox and returns its result and output.
func (x *box) run(t *testing.T, req guest.ExecRequest) (guest.ExecResult, string, string) {
	t.Helper()
	if req.Env == nil {
		req.Env = shEnv
	}
	var out, errb syncBuffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := x.conn.Exec(ctx, req, nil, &out, &errb)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return res, out.String(), errb.String()
}

// sh runs a shell script and returns its result and combined output.
func (x *box) sh(t *testing.T, script string) (guest.ExecResult, string) {
	t.Helper()
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", script}})
	return res, out + errOut
}

// mustSh runs a script that must exit 0 and returns its stdout.
func (x *box) mustSh(t *testing.T, script string) string {
	t.Helper()
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: []string{"sh", "-c", script}})
	if res.ExitCode != 0 {
		t.Fatalf("%q: %+v\nstdout: %s\nstderr: %s", script, res, out, errOut)
	}
	return out
}

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// pidNS is the pid namespace of pid, as the host names it.
func pidNS(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// inNS lists the host pids of every process in pid namespace ns: the
// host's census of a sandbox, not what it says about itself.
func inNS(ns string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			if _, st, err := procStart(pid); err == nil && st != 'Z' {
				out = append(out, pid)
			}
		}
	}
	return out
}

// withCmdline lists the host pids whose command line holds marker.
func withCmdline(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cl, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// waitFor polls cond every 10ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantClass checks that err is of class want.
func wantClass(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want an error of class %q (%s)", err, want, errdefs.Code(want))
	}
}

// leftovers lists what of sandbox id is on the host: state, cgroups,
// stage. Empty after Remove or a failed Create.
func leftovers(b *Backend, id string) []string {
	var out []string
	for _, p := range append(b.cg.dirs(id), filepath.Join(b.opts.StateDir, id), filepath.Join(b.stageDir, id)) {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode, uid int) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	os.Chown(dst, uid, uid)
}

// lines splits output into trimmed non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir) }
