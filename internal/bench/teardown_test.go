package bench

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestTeardownFindsLeftovers gives the density teardown's search one of
// each thing it looks for (a new zombie, a loop device over a file in the
// scratch dir, a cgroup of one of the run's containers) and checks it
// names each; and that a zombie from before the run is not the run's.
func TestTeardownFindsLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		skip.OrFail(t, "the leftover search reads loop devices and makes a cgroup: run as root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		skip.OrFail(t, "losetup is not installed")
	}
	old := zombie(t)
	before := snapshotHost()
	if !before.zombies[zombieKey(old)] {
		t.Fatalf("zombie %d not in the snapshot %v", old.Process.Pid, before.zombies)
	}
	d := &daemonProc{root: t.TempDir()}
	if left := d.hostLeftovers(nil, before); len(left) != 0 {
		t.Fatalf("a clean machine has leftovers: %v", left)
	}

	z := zombie(t)
	img := filepath.Join(d.root, "ws.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
	id := fakeContainerID(t)
	cg := dockerCgroup(t, id)

	left := d.hostLeftovers([]string{id}, before)
	want := []string{"zombie process " + zombieKey(z), "loop device " + loop + " (" + img + ")", "cgroup " + cg}
	for _, w := range want {
		if !slices.Contains(left, w) {
			t.Errorf("leftovers %q do not name %q", left, w)
		}
	}
	if len(left) != len(want) {
		t.Errorf("leftovers %q, want exactly %q", left, want)
	}
}

// zombie starts a child that exits and is not reaped until the test ends,
// and returns once it is a zombie.
func zombie(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	if err := waitExited(cmd.Process.Pid); err != nil {
		t.Fatalf("waitid: %v", err)
	}
	return cmd
}

// zombieKey is how zombies names cmd's process.
func zombieKey(cmd *exec.Cmd) string {
	return strconv.Itoa(cmd.Process.Pid) + " (true) parent " + strconv.Itoa(os.Getpid())
}

func fakeContainerID(t *testing.T) string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// dockerCgroup makes the pids cgroup docker's cgroupfs driver gives
// container id (or the systemd driver's, on a unified hierarchy) and
// returns its path; the test removes it.
func dockerCgroup(t *testing.T, id string) string {
	t.Helper()
	parent := "/sys/fs/cgroup/pids/docker"
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		parent = "/sys/fs/cgroup/system.slice" // cgroup v2
	}
	made := false
	if _, err := os.Stat(parent); os.IsNotExist(err) {
		if err := os.Mkdir(parent, 0o755); err != nil {
			skip.OrFail(t, "cannot make "+parent+": "+err.Error())
		}
		made = true
	}
	cg := filepath.Join(parent, id)
	if strings.HasSuffix(parent, "system.slice") {
		cg = filepath.Join(parent, "docker-"+id+".scope")
	}
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(cg)
		if made {
			os.Remove(parent)
		}
	})
	return cg
}
