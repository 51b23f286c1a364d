package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil/skip"

	"github.com/agentbox/agentbox/internal/mountinfo"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/store/sqlstore"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/pgtest"
	"github.com/agentbox/agentbox/internal/workspace"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "agentbox")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building agentbox: %v\n%s", err, out)
		os.Exit(1)
	}
	// The daemon finds the guest next to its own binary.
	guestBuild := exec.Command("go", "build", "-o", filepath.Join(dir, "agentbox-guest"), "../agentbox-guest")
	guestBuild.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := guestBuild.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building agentbox-guest: %v\n%s", err, out)
		os.Exit(1)
	}
	code := pgtest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// testStoreEnv=postgres runs every daemon that startDaemon starts on
// PostgreSQL: a database of its own per data dir (pgtest), kept across
// restarts on that data dir. CI runs the end-to-end tests once so.
const testStoreEnv = "AGENTBOX_TEST_STORE"

var (
	testStoresMu sync.Mutex
	testStores   = map[string]string{}
)

// testStore returns the PostgreSQL database of data dir data, making it
// at the first call.
func testStore(t *testing.T, data string) string {
	testStoresMu.Lock()
	defer testStoresMu.Unlock()
	if u, ok := testStores[data]; ok {
		return u
	}
	u := pgtest.NewDatabase(t)
	testStores[data] = u
	return u
}

// openDataStore opens the store of a daemon on data: its PostgreSQL
// database when testStore made one, else its SQLite file.
func openDataStore(t *testing.T, data string) *sqlstore.Store {
	t.Helper()
	st, err := openDataStoreErr(t, data)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func openDataStoreErr(t *testing.T, data string) (*sqlstore.Store, error) {
	testStoresMu.Lock()
	u, ok := testStores[data]
	testStoresMu.Unlock()
	if ok {
		return sqlstore.OpenPostgres(t.Context(), u)
	}
	return sqlstore.Open(t.Context(), filepath.Join(data, "agentbox.db"))
}

// daemon is a real `agentbox serve` process on a data dir.
type daemonProc struct {
	data string
	cmd  *exec.Cmd
	logs *bytes.Buffer
}

func startDaemon(t *testing.T, data string, extra ...string) *daemonProc {
	t.Helper()
	if os.Getenv(testStoreEnv) == "postgres" && !slices.Contains(extra, "--store") {
		extra = append(extra, "--store", testStore(t, data))
	}
	d := &daemonProc{data: data, logs: &bytes.Buffer{}}
	d.cmd = exec.Command(binary, append([]string{"serve", "--data", data, "--log-level", "debug"}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	d.cmd.Env = append(os.Environ(), "AGENTBOX_DATA="+data)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cl := d.client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := cl.Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) || d.cmd.ProcessState != nil {
			d.cmd.Process.Kill()
			t.Fatalf("daemon did not come up:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, bounded
	}
	return d
}

func (d *daemonProc) client(t *testing.T) *client.Client {
	cl, err := client.New("unix://"+filepath.Join(d.data, "agentbox.sock"), "")
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func (d *daemonProc) kill9(t *testing.T) {
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
}

func (d *daemonProc) stop(t *testing.T) {
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v\n%s", err, d.logs)
		}
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		t.Errorf("daemon did not stop on SIGTERM")
	}
}

// cleanupAll removes every workspace (extra: serve's flags, such as --store) (unmounting overlays) through a fresh
// daemon so that no mount outlives the test.
func cleanupAll(t *testing.T, data string, extra ...string) {
	t.Cleanup(func() {
		ctx := context.Background()
		d := startDaemon(t, data, extra...)
		cl := d.client(t)
		wss, _ := cl.ListWorkspaces(ctx, "", "")
		for _, w := range wss {
			if err := cl.RemoveWorkspace(ctx, w.ID); err != nil {
				t.Errorf("cleanup %s: %v", w.ID, err)
			}
		}
		d.stop(t)
		if n := mountsUnder(t, data); n != 0 {
			t.Errorf("%d mounts left under %s", n, data)
		}
	})
}

func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	out, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(out)
}

// cli runs the agentbox binary and returns stdout, stderr and exit code.
func runCLI(t *testing.T, data string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_DATA="+data)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// oneJSON decodes exactly one JSON document from s.
func oneJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not a JSON document: %v\n%s", err, s)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than one JSON document:\n%s", s)
	}
	return v
}

func TestCLIEveryCommandJSON(t *testing.T) {
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"main.py": "print('hi')\n", "lib/util.py": "X = 1\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)

	j := func(stdin string, args ...string) map[string]any {
		t.Helper()
		out, errOut, code := runCLI(t, data, stdin, append([]string{"--json"}, args...)...)
		if code != 0 {
			t.Fatalf("agentbox %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return oneJSON(t, out)
	}
	repo := j("", "repo", "add", src.Dir)
	repoID := repo["id"].(string)
	ws := j("", "ws", "create", "--repo", repoID, "--task", "t1")
	id := ws["id"].(string)
	fork := j("", "ws", "fork", id)
	if q := ws["disk_quota"]; q != float64(10<<30) {
		t.Errorf("a workspace under the default configuration has disk_quota %v, want 10 GiB", q)
	}
	if q := j("", "ws", "fork", id, "--disk", "64M")["disk_quota"]; q != float64(64<<20) {
		t.Errorf("ws fork --disk 64M: disk_quota %v", q)
	}
	if d := j("", "ws", "status", id)["disk"].(map[string]any); d["quota_bytes"] != float64(10<<30) || d["free_bytes"].(float64) <= 0 {
		t.Errorf("ws status: disk %v", d)
	}
	withID := [][]string{
		{"repo", "show", repoID},
		{"repo", "fetch", repoID},
		{"ws", "show", id},
		{"ws", "path", id},
		{"ws", "status", id},
		{"ws", "diff", id},
		{"files", "write", id, "new/file.txt", "-p"},
		{"files", "read", id, "new/file.txt"},
		{"files", "stat", id, "main.py"},
		{"files", "ls", id},
		{"files", "mkdir", id, "d1"},
		{"files", "mv", id, "d1", "d2"},
		{"files", "grep", id, "print"},
		{"files", "rm", id, "d2"},
		{"ws", "commit", id, "-m", "msg"},
		{"version"},
		{"ws", "rm", fork["id"].(string)},
	}
	for _, args := range withID {
		doc := j("content\n", args...)
		if doc["id"] == nil || doc["id"] == "" {
			t.Errorf("agentbox --json %v: no id in %v", args, doc)
		}
	}
	for _, tc := range []struct {
		args []string
		key  string
	}{{[]string{"repo", "ls"}, "repos"}, {[]string{"ws", "ls"}, "workspaces"}, {[]string{"events", "--workspace", id}, "events"}} {
		doc := j("", tc.args...)
		items, ok := doc[tc.key].([]any)
		if !ok || len(items) == 0 {
			t.Fatalf("%v: %s = %v", tc.args, tc.key, doc[tc.key])
		}
		for _, it := range items {
			if it.(map[string]any)["id"] == nil {
				t.Errorf("%v: item without id: %v", tc.args, it)
			}
		}
	}
	if got := j("", "files", "read", id, "new/file.txt")["content"]; got != "content\n" {
		t.Errorf("read back %q", got)
	}

	// Failures: non-zero exit, one JSON error document with --json, one
	// line on stderr without it.
	out, _, code := runCLI(t, data, "", "--json", "ws", "show", "ws_123")
	if code == 0 {
		t.Fatal("show of unknown workspace exited 0")
	}
	e := oneJSON(t, out)["error"].(map[string]any)
	if e["code"] != "not_found" || e["message"] != "workspace ws_123 not found" {
		t.Errorf("error doc = %v", e)
	}
	for _, args := range [][]string{
		{"ws", "show", "ws_123"},
		{"files", "read", id, "../../../etc/shadow"},
		{"ws", "create", "--repo", "ftp://nope.invalid/x"},
		{"ws", "create", "--repo", repoID, "--ref", "no-such-ref"},
		{"repo", "rm", repoID},
		{"ws", "create"},
		{"ws", "create", "--repo", repoID, "--disk", "1K"},
		{"ws", "create", "--repo", repoID, "--disk", "lots"},
		{"nonsense"},
	} {
		out, errOut, code := runCLI(t, data, "", args...)
		if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "agentbox: ") {
			t.Errorf("agentbox %v: exit %d stdout %q stderr %q; want non-zero, one line on stderr", args, code, out, errOut)
		}
	}
	// files read prints raw bytes without --json.
	out, _, _ = runCLI(t, data, "", "files", "read", id, "main.py")
	if out != "print('hi')\n" {
		t.Errorf("raw read = %q", out)
	}
}

// TestKill9Durability writes files through the API from several clients,
// kills the daemon with SIGKILL in the middle, and checks that every write
// the API acknowledged is there with its content after a restart.
func TestKill9Durability(t *testing.T) {
	data := t.TempDir()
	src := testutil.NewRepo(t, testutil.ManyFiles(200))
	d := startDaemon(t, data)
	cleanupAll(t, data)
	cl := d.client(t)
	ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		var mu sync.Mutex
		acked := map[string]string{}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					p := fmt.Sprintf("r%d/w%d/f%04d.txt", round, w, i)
					content := fmt.Sprintf("%d-%d-%d-%x\n", round, w, i, rand.Uint64())
					if _, err := cl.WriteFile(context.Background(), ws.ID, p, strings.NewReader(strings.Repeat(content, 50)), 0, true); err != nil {
						return // the daemon died mid-request: not acknowledged
					}
					mu.Lock()
					acked[p] = strings.Repeat(content, 50)
					mu.Unlock()
				}
			}()
		}
		// Kill once enough writes are acknowledged (bounded wait).
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= 40+rand.IntN(40) || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		d.kill9(t)
		close(stop)
		wg.Wait()
		if len(acked) == 0 {
			t.Fatal("no write was acknowledged before the kill")
		}
		d = startDaemon(t, data)
		cl = d.client(t)
		for p, want := range acked {
			var got bytes.Buffer
			if _, err := cl.ReadFile(t.Context(), ws.ID, p, &got); err != nil || got.String() != want {
				t.Fatalf("round %d: acknowledged write %s lost after kill -9: %v (got %d bytes)", round, p, err, got.Len())
			}
		}
		t.Logf("round %d: %d acknowledged writes all present after SIGKILL", round, len(acked))
		// No temp files left visible as changes beyond the acked ones.
		st, err := cl.Status(t.Context(), ws.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Changes {
			if strings.Contains(c.Path, ".agentbox-tmp") {
				t.Errorf("a write interrupted by the crash left %s visible as a change", c.Path)
			}
		}
	}
	d.stop(t)
}

// TestRemountAfterReboot unmounts every workspace by hand (as a reboot
// would) while the daemon is down; the next start mounts them all again
// before it serves.
func TestRemountAfterReboot(t *testing.T) {
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"a.txt": "base\n"})
	d := startDaemon(t, data)
	cleanupAll(t, data)
	cl := d.client(t)
	var ids []string
	for i := range 3 {
		ws, err := cl.CreateWorkspace(t.Context(), client.CreateWorkspace{Repo: src.Dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.WriteFile(t.Context(), ws.ID, "a.txt", strings.NewReader(fmt.Sprintf("changed %d\n", i)), 0, false); err != nil {
			t.Fatal(err)
		}
		if ws.Driver != workspace.Overlay {
			t.Fatalf("driver = %s, want overlay on this host", ws.Driver)
		}
		ids = append(ids, ws.ID)
	}
	d.kill9(t)
	// A reboot: each workspace's overlay, then its quota volume, goes.
	for _, id := range ids {
		mps, err := mountinfo.Under(filepath.Join(data, "workspaces", id))
		if err != nil || len(mps) != 2 {
			t.Fatalf("mounts of %s: %q, %v; want the overlay and the quota volume", id, mps, err)
		}
		for _, mp := range mps { // deepest first
			if err := unix.Unmount(mp, 0); err != nil {
				t.Fatalf("unmounting %s: %v", mp, err)
			}
		}
	}
	if n := mountsUnder(t, data); n != 0 {
		t.Fatalf("%d mounts left after manual unmount", n)
	}
	d = startDaemon(t, data)
	defer d.stop(t)
	cl = d.client(t)
	for i, id := range ids {
		var got bytes.Buffer
		if _, err := cl.ReadFile(t.Context(), id, "a.txt", &got); err != nil || got.String() != fmt.Sprintf("changed %d\n", i) {
			t.Errorf("%s after remount: %q, %v", id, got.String(), err)
		}
		ev, _ := cl.Events(t.Context(), client.EventFilter{Workspace: id, Type: "workspace.remounted"})
		if len(ev) != 1 {
			t.Errorf("%s: %d remount events, want 1", id, len(ev))
		}
		// git sees the same state as before the "reboot".
		ws, _ := cl.GetWorkspace(t.Context(), id)
		if out := testutil.Git(t, ws.Path, "-c", "safe.directory=*", "status", "--porcelain"); out != "M a.txt" {
			t.Errorf("%s: git status %q", id, out)
		}
	}
	if n := mountsUnder(t, data); n != 2*len(ids) {
		t.Errorf("%d mounts after restart, want %d", n, 2*len(ids))
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	data := t.TempDir()
	d := startDaemon(t, data)
	defer d.stop(t)
	// The first daemon's pid, as the refusal must name it.
	pid := strconv.Itoa(d.cmd.Process.Pid)
	out, errOut, code := runCLI(t, data, "", "serve", "--data", data)
	if code == 0 || !strings.Contains(out+errOut, "held by another agentbox daemon (pid "+pid+")") {
		t.Errorf("second daemon, same socket: exit %d, %s%s", code, out, errOut)
	}
	// On another listener the data dir is still the first daemon's: a
	// second one would take its sandboxes for a crash's leftovers.
	before, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "serve", "--data", data, "--listen", "tcp://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGENTBOX_TOKEN=second-daemon-token-0123456789")
	combined, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(combined), "held by another agentbox daemon (pid "+pid+")") {
		t.Errorf("second daemon on TCP: %v, %s", err, combined)
	}
	after, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != len(after) {
		t.Errorf("the refused daemon changed the data dir: %d entries, then %d", len(before), len(after))
	}
	info, err := os.Stat(filepath.Join(data, "agentbox.sock"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, %v; want 0600", info.Mode().Perm(), err)
	}
	if _, err := d.client(t).Health(t.Context()); err != nil {
		t.Errorf("first daemon stopped answering: %v", err)
	}
}

// TestTCPNeedsToken: the daemon refuses TCP without a token, and with one
// it answers only requests that carry it.
func TestTCPNeedsToken(t *testing.T) {
	data := t.TempDir()
	_, errOut, code := runCLI(t, data, "", "serve", "--data", data, "--listen", "tcp://127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "requires a token") {
		t.Fatalf("TCP without token: exit %d, %s", code, errOut)
	}
	const token = "tcp-test-token-0123456789"
	cmd := exec.Command(binary, "serve", "--data", data, "--listen", "tcp://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGENTBOX_TOKEN="+token)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	// The daemon logs its address once it serves.
	dec := json.NewDecoder(stderr)
	var addr string
	for addr == "" {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatalf("daemon log ended before it served: %v", err)
		}
		if a, ok := line["addr"].(string); ok && line["msg"] == "agentbox serving" {
			addr = a
		}
	}
	go io.Copy(io.Discard, stderr)
	for _, tc := range []struct {
		token string
		ok    bool
	}{{token, true}, {"", false}, {"wrong-token-000000000000", false}} {
		cl, _ := client.New(addr, tc.token)
		_, err := cl.ListRepos(t.Context())
		if (err == nil) != tc.ok {
			t.Errorf("token %q: err = %v", tc.token, err)
		}
	}
}

// everyBackend runs f as a parallel subtest on docker, gvisor and local,
// each against the busybox image (built, or found up to date, first): the
// CLI suites that every backend must pass.
func everyBackend(t *testing.T, f func(t *testing.T, backend string)) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"docker", "gvisor", "local"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f(t, backend)
		})
	}
}

// TestExecThroughTheCLI runs commands in a real docker sandbox through the
// daemon: output streams, the exit status is the command's, and a sandbox
// removed from outside is replaced on the next exec.
// TestExecThroughTheCLI runs the sandbox commands on every backend, as a
// user would: the local backend needs the image's root unpacked in the
// data dir, which `agentbox image build` does.
func TestExecThroughTheCLI(t *testing.T) {
	everyBackend(t, testExecThroughTheCLI)
}

func testExecThroughTheCLI(t *testing.T, backend string) {
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	if backend == "local" {
		if out, errOut, code := runCLI(t, data, "", "--json", "image", "build", "--kind", "busybox"); code != 0 {
			t.Fatalf("image build: %s %s", out, errOut)
		}
	}
	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--backend", backend, "--image", "agentbox/busybox:latest", "--memory", "256M", "--pids", "128")
	if code != 0 {
		t.Fatalf("sandbox create: %s %s", out, errOut)
	}
	sb := oneJSON(t, out)
	if sb["state"] != "running" || sb["backend"] != backend {
		t.Fatalf("sandbox = %v", sb)
	}
	out, errOut, code = runCLI(t, data, "", "exec", ws, "--env", "GREETING=hi", "--", "sh", "-c", "cat hello.txt; echo $GREETING; echo oops >&2; exit 3")
	if code != 3 || out != "hello from the repo\nhi\n" || errOut != "oops\n" {
		t.Errorf("exec: exit %d stdout %q stderr %q", code, out, errOut)
	}
	// End the environment behind the daemon's back; the next exec heals.
	killFromOutside(t, backend, sb["backend_ref"].(string))
	out, errOut, code = runCLI(t, data, "", "--json", "exec", ws, "--", "cat", "hello.txt")
	res, ok := oneJSON(t, out)["result"].(map[string]any)
	if !ok {
		t.Fatalf("exec after removal: exit %d, no result: %s %s", code, out, errOut)
	}
	if code != 0 || res["replaced"] != true || res["sandbox_id"] == sb["id"] {
		t.Errorf("exec after removal: exit %d %v %s", code, res, errOut)
	}
	_, errOut, code = runCLI(t, data, "", "exec", ws, "--timeout", "1s", "--", "sleep", "60")
	if code != 124 || !strings.Contains(errOut, "timed out") {
		t.Errorf("timeout: exit %d %q", code, errOut)
	}
}

// killFromOutside ends a sandbox's environment as an operator or a crash
// would, without a word to agentbox.
func killFromOutside(t *testing.T, backend, ref string) {
	t.Helper()
	if backend != "local" {
		if out, err := exec.Command("docker", "rm", "-f", ref).CombinedOutput(); err != nil {
			t.Fatalf("docker rm -f %s: %v %s", ref, err, out)
		}
		return
	}
	// Every process of a local sandbox is in its cgroup (v1: one per
	// controller; v2: one).
	files, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/" + ref + "/cgroup.procs")
	more, _ := filepath.Glob("/sys/fs/cgroup/agentbox/" + ref + "/cgroup.procs")
	killed := 0
	for _, f := range append(files, more...) {
		b, _ := os.ReadFile(f)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	if killed == 0 {
		t.Fatalf("no process of local sandbox %s found to kill", ref)
	}
}
