package backendtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/testutil/syncbuf"
)

// Bounds on how long the suite waits for things that should be prompt.
const (
	connectTimeout = 30 * time.Second // create -> the guest's connection
	promptly       = 15 * time.Second // a stop, kill or remove to be seen
	execTimeout    = 60 * time.Second // any one command
	removeTimeout  = 60 * time.Second
)

// defaultLimits are small limits that keep the suite's sandboxes cheap.
var defaultLimits = sandbox.Limits{CPUs: 1, MemoryBytes: 256 << 20, Pids: 512, TmpBytes: 32 << 20}

// suite is one Run: one backend and the canary its sandboxes must not see.
type suite struct {
	h      Harness
	b      sandbox.Backend
	canary string // name of a variable set in this process only
}

func newSuite(t *testing.T, h Harness) *suite {
	t.Helper()
	h.defaults()
	switch {
	case h.New == nil || h.Image == "" || h.Guest == "" || h.Kill == nil:
		t.Fatal("backendtest: the harness needs New, Image, Guest and Kill")
	case guest.DefaultSocketPath != sandbox.RunDir+"/agentbox.sock":
		t.Fatalf("the guest dials %s, which is not in %s", guest.DefaultSocketPath, sandbox.RunDir)
	}
	users := sandbox.CreateRequest{UID: 1, GID: 2, GuestUID: 3, GuestGID: 4}.GuestEnvUsers()
	if want := []string{guest.UserEnv + "=3:4", guest.CommandUserEnv + "=1:2"}; !slices.Equal(users, want) {
		t.Fatalf("CreateRequest.GuestEnvUsers is %q, the guest reads %q", users, want)
	}
	if os.Geteuid() != 0 {
		SkipOrFail(t, "the backend suite chowns workspaces to the sandbox user and reads other processes' environments: run as root")
	}
	if _, err := os.Stat(h.Guest); err != nil {
		t.Fatalf("guest binary: %v", err)
	}
	s := &suite{h: h}
	// A canary in this process's environment: no sandbox may see it.
	s.canary = "AGENTBOX_CANARY_" + strings.ToUpper(randHex(6))
	os.Setenv(s.canary, "canary-"+randHex(8))
	t.Cleanup(func() { os.Unsetenv(s.canary) })
	s.b = h.New(t)
	return s
}

// box is one sandbox under test, with the daemon's end of its guest.
type box struct {
	s       *suite
	req     sandbox.CreateRequest
	info    sandbox.Info
	token   string
	ln      *guest.Listener
	conn    *guest.Conn
	log     *syncBuffer
	env     []string // default environment of commands
	created time.Duration
	connect time.Duration
	// dumpLogs asks for the environment's log at the end even when the
	// test passes (under -v), for tests that end a sandbox on purpose.
	dumpLogs bool
}

// logEnv logs what the harness knows of the environment.
func (x *box) logEnv(t *testing.T, ctx context.Context) {
	if x.s.h.Logs != nil && x.info.Ref != "" {
		t.Logf("environment log of %s:\n%s", x.req.ID, x.s.h.Logs(ctx, x.info.Ref))
	}
}

// boxOpts tune one sandbox.
type boxOpts struct {
	files  string          // reuse this workspace; empty makes a new one
	limits *sandbox.Limits // nil: defaultLimits
}

// newFiles makes an empty workspace directory owned by the sandbox user.
func (s *suite) newFiles(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "files")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, s.h.UID, s.h.GID); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newRunDir makes a run directory short enough for a socket path.
func newRunDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "abr")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// request builds a valid create request with fresh ids, run directory and
// token, and the listener the guest will dial.
func (s *suite) request(t *testing.T, o boxOpts) (sandbox.CreateRequest, *guest.Listener, *syncBuffer, string) {
	t.Helper()
	files := o.files
	if files == "" {
		files = s.newFiles(t)
	}
	limits := defaultLimits
	if o.limits != nil {
		limits = *o.limits
	}
	runDir := newRunDir(t)
	tok, err := guest.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	// As the daemon makes it: the guest's own, when it has a user.
	var owner *guest.Owner
	if s.h.GuestUID != 0 {
		owner = &guest.Owner{UID: s.h.GuestUID, GID: s.h.GuestGID}
		if err := os.Chown(runDir, s.h.GuestUID, s.h.GuestGID); err != nil {
			t.Fatal(err)
		}
		os.Chmod(runDir, 0o711)
	}
	log := &syncBuffer{}
	ln, err := guest.Listen(filepath.Join(runDir, "agentbox.sock"), tok, guest.ListenOptions{
		Logger: slog.New(slog.NewTextHandler(log, nil)),
		Owner:  owner,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		if t.Failed() {
			t.Logf("daemon-side guest log:\n%s", log.String())
		}
	})
	req := sandbox.CreateRequest{
		ID:          "sb_" + randHex(6),
		WorkspaceID: "ws_" + randHex(6),
		Files:       files,
		RunDir:      runDir,
		Guest:       s.h.Guest,
		GuestEnv:    []string{guest.TokenEnv + "=" + tok},
		UID:         s.h.UID,
		GID:         s.h.GID,
		GuestUID:    s.h.GuestUID,
		GuestGID:    s.h.GuestGID,
		Spec:        sandbox.Spec{Backend: s.b.Name(), Image: s.h.Image, Limits: limits},
	}
	return req, ln, log, tok
}

// create makes a sandbox, waits for its guest, and removes it when the
// test ends.
func (s *suite) create(t *testing.T, o boxOpts) *box {
	t.Helper()
	req, ln, log, tok := s.request(t, o)
	x := &box{s: s, req: req, ln: ln, log: log, token: tok, env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}}
	start := time.Now()
	info, err := s.b.Create(t.Context(), req)
	x.created = time.Since(start)
	if err != nil {
		t.Fatalf("Create %s: %v", req.ID, err)
	}
	x.info = info
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		if t.Failed() || testing.Verbose() && x.dumpLogs {
			x.logEnv(t, ctx)
		}
		if err := s.b.Remove(ctx, info.Ref); err != nil {
			t.Errorf("Remove %s at cleanup: %v", req.ID, err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), connectTimeout)
	defer cancel()
	conn, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest of %s did not connect within %s: %v", req.ID, connectTimeout, err)
	}
	x.connect = time.Since(start)
	x.conn = conn
	// The listener first, as the daemon does: a guest whose connection
	// drops dials again at once, and would be refused.
	t.Cleanup(func() { ln.Close(); conn.Close() })
	return x
}

// exec runs one command with the box's default environment unless req
// names one.
func (x *box) exec(t *testing.T, req guest.ExecRequest, stdin string) (guest.ExecResult, string, string, error) {
	t.Helper()
	if req.Env == nil {
		req.Env = x.env
	}
	var out, errOut syncBuffer
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	ctx, cancel := context.WithTimeout(t.Context(), execTimeout)
	defer cancel()
	res, err := x.conn.Exec(ctx, req, in, &out, &errOut)
	return res, out.String(), errOut.String(), err
}

// sh runs a shell script and fails the test if it cannot be run at all.
func (x *box) sh(t *testing.T, script string, args ...string) (guest.ExecResult, string, string) {
	t.Helper()
	res, out, errOut, err := x.exec(t, guest.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...)}, "")
	if err != nil {
		t.Fatalf("sh -c %q: %v (%+v)", script, err, res)
	}
	return res, out, errOut
}

// mustSh runs a shell script that must exit 0 and returns its stdout.
func (x *box) mustSh(t *testing.T, script string, args ...string) string {
	t.Helper()
	res, out, errOut := x.sh(t, script, args...)
	if res.ExitCode != 0 || res.Lost {
		t.Fatalf("sh -c %q: %+v\nstdout: %s\nstderr: %s", script, res, out, errOut)
	}
	return out
}

// markers are what marks this sandbox's processes on the host.
func (x *box) markers() []string {
	m := []string{x.token}
	if x.s.h.Markers != nil {
		m = append(m, x.s.h.Markers(x.info)...)
	}
	return m
}

// leftovers asks the harness what the engine still holds for the box.
func (s *suite) leftovers(t *testing.T, id string) []string {
	t.Helper()
	if s.h.Leftovers == nil {
		return nil
	}
	left, err := s.h.Leftovers(t.Context(), id)
	if err != nil {
		t.Fatalf("listing leftovers of %s: %v", id, err)
	}
	return left
}

// census lists the host processes whose command line, environment or
// cgroup holds one of the markers: the host's view, not what a sandbox
// says.
func census(markers []string) []string {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		environ, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		cgroup, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		for _, m := range markers {
			if m != "" && (bytes.Contains(cmdline, []byte(m)) || bytes.Contains(environ, []byte(m)) || bytes.Contains(cgroup, []byte(m))) {
				out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " ")))
				break
			}
		}
	}
	return out
}

// eventually polls cond until it holds or within passes, and returns
// whether it held.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountLine is one line of a mountinfo file.
type mountLine struct {
	point   string
	options []string // per-mount options
	fstype  string
}

// parseMountinfo reads the mount table a sandbox printed.
func parseMountinfo(text string) []mountLine {
	var out []mountLine
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		sep := slices.Index(f, "-")
		ml := mountLine{point: unescape(f[4]), options: strings.Split(f[5], ",")}
		if sep > 0 && sep+1 < len(f) {
			ml.fstype = f[sep+1]
		}
		out = append(out, ml)
	}
	return out
}

// find returns the last mount at point (the one on top).
func findMount(lines []mountLine, point string) (mountLine, bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].point == point {
			return lines[i], true
		}
	}
	return mountLine{}, false
}

func unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// signalWriter closes ready the first time what it received contains want.
type signalWriter struct {
	syncBuffer
	want  string
	once  sync.Once
	ready chan struct{}
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, ready: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return n, err
}
