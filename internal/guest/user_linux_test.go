package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// TestGuestUser starts the guest as root on the host, as the docker and
// gvisor backends do, with a user of its own apart from its commands'
// (SECURITY.md H44), and checks from the host what each process holds.
func TestGuestUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		skip.OrFail(t, "starting the guest as root needs root")
	}
	const guestUID, cmdUID = 65533, 1000
	dir := shortDir(t)
	os.Chown(dir, guestUID, guestUID)
	os.Chmod(dir, 0o711)
	sock := filepath.Join(dir, "agentbox.sock")
	token, _ := NewToken()
	ln, err := Listen(sock, token, ListenOptions{Owner: &Owner{UID: guestUID, GID: guestUID}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	log := &syncBuffer{}
	cmd := exec.Command(guestBin, "-socket", sock)
	cmd.Env = append(append([]string{}, hostEnv...), TokenEnv+"="+token,
		fmt.Sprintf("%s=%d:%d", UserEnv, guestUID, guestUID), fmt.Sprintf("%s=%d:%d", CommandUserEnv, cmdUID, cmdUID))
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("guest log:\n%s", log)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatalf("the guest did not connect: %v", err)
	}
	defer c.Close()

	none := map[string]string{"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000"}
	check := func(who string, pid int, uid int, want map[string]string) {
		t.Helper()
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				got[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		ids := fmt.Sprintf("%d %d %d %d", uid, uid, uid, uid)
		if got["Uid"] != ids || got["Gid"] != ids || got["Groups"] != "" {
			t.Errorf("%s (pid %d) runs as uid %q gid %q groups %q, want %s", who, pid, got["Uid"], got["Gid"], got["Groups"], ids)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s (pid %d): %s %s, want %s", who, pid, k, got[k], v)
			}
		}
	}
	// CAP_KILL, CAP_SETGID and CAP_SETUID, bits 5 to 7; nothing else.
	check("the guest", c.Info().Pid, guestUID, map[string]string{"CapInh": "0000000000000000", "CapPrm": "00000000000000e0",
		"CapEff": "00000000000000e0", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000"})
	// A command and its reaper: the commands' user, nothing else.
	p, err := c.Start(t.Context(), ExecRequest{Argv: []string{"sleep", "30"}, Env: hostEnv, Dir: "/"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	nnp := map[string]string{"NoNewPrivs": "1", "Seccomp": "2"}
	for k, v := range none {
		nnp[k] = v
	}
	check("a command", p.Pid(), cmdUID, nnp)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	reaper, _ := strconv.Atoi(f[1])
	check("its reaper", reaper, cmdUID, none)
	// Its terminal, too.
	res, out, _, err := run(t, c, ExecRequest{TTY: true, Argv: []string{"sh", "-c", `stat -c %u "$(tty)"`}, Env: hostEnv, Dir: "/"}, "")
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out) != strconv.Itoa(cmdUID) {
		t.Errorf("the terminal of a command belongs to %q (%v %+v), want %d", out, err, res, cmdUID)
	}
}
