package local

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// crashDaemonEnv makes the test binary play a daemon that creates one
// sandbox, prints its record and waits to be killed.
const crashDaemonEnv = "AGENTBOX_LOCAL_TEST_CRASH_DAEMON"

// crashDaemon is the test binary's main when crashDaemonEnv is set: its
// value is the JSON of the Options and the CreateRequest to use.
func crashDaemon() int {
	var in struct {
		Opts Options
		Req  sandbox.CreateRequest
	}
	if err := json.Unmarshal([]byte(os.Getenv(crashDaemonEnv)), &in); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	b, err := New(in.Opts)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if _, err := b.Create(context.Background(), in.Req); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	r, err := b.lookup(in.Req.ID)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Printf("pid %d\n", r.Pid)
	select {} // until killed
}

// TestDaemonCrash: when the daemon dies (kill -9), its sandboxes die with
// it, and the next daemon finds their records, reports them stopped, and
// removes what is left.
func TestDaemonCrash(t *testing.T) {
	t.Parallel()
	requireJails(t)
	opts := Options{
		StateDir: filepath.Join(t.TempDir(), "state"), ImagesDir: imagesDir,
		CgroupParent: "agentbox-test-" + randHex(4),
	}
	req, _ := boxRequest(t, sandbox.Spec{Image: "busybox"})
	in, err := json.Marshal(struct {
		Opts Options
		Req  sandbox.CreateRequest
	}{opts, req})
	if err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command(os.Args[0], "-test.run=^$")
	daemon.Env = append(os.Environ(), crashDaemonEnv+"="+string(in))
	out, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	daemon.Stderr = os.Stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer daemon.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	var pid int
	if _, serr := fmt.Sscanf(line, "pid %d", &pid); err != nil || serr != nil {
		daemon.Process.Kill()
		daemon.Wait()
		t.Fatalf("the daemon said %q (%v)", line, err)
	}
	ns := pidNS(t, pid)
	if len(inNS(ns)) == 0 {
		t.Fatal("control: the sandbox of the daemon runs no process")
	}
	if err := daemon.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	daemon.Wait()
	waitFor(t, 5*time.Second, "the sandbox to die with its daemon", func() bool { return len(inNS(ns)) == 0 })

	b := newBackendWith(t, opts)
	list, err := b.List(t.Context(), map[string]string{sandbox.LabelSandbox: req.ID})
	if err != nil || len(list) != 1 || list[0].State != sandbox.StateStopped {
		t.Fatalf("the next daemon lists %+v %v, want %s stopped", list, err, req.ID)
	}
	if err := b.Remove(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(b, req.ID); len(left) != 0 {
		t.Errorf("left after Remove: %v", left)
	}
	// The run dir can be reused: nothing holds the socket path.
	if mps, _ := mountsUnder(req.RunDir); len(mps) != 0 {
		t.Errorf("mounts left under the run dir: %v", mps)
	}
}
