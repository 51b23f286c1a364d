package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	x := startBox(t, b, sandbox.Spec{})
	ctx := t.Context()

	wantLabels := map[string]string{
		sandbox.LabelManaged: "1", sandbox.LabelSandbox: x.id, sandbox.LabelWorkspace: x.info.Labels[sandbox.LabelWorkspace],
		LabelBackend: "local",
	}
	want := sandbox.Info{ID: x.id, Backend: "local", Ref: x.id, State: sandbox.StateRunning, Labels: wantLabels}
	if diff := cmp.Diff(want, x.info); diff != "" {
		t.Errorf("Create info (-want +got):\n%s", diff)
	}
	got, err := b.Inspect(ctx, x.id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inspect (-want +got):\n%s", diff)
	}

	// A second sandbox on another workspace: List filters by label.
	y := startBox(t, b, sandbox.Spec{})
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{sandbox.LabelManaged: "1"}, []string{x.id, y.id}},
		{map[string]string{sandbox.LabelWorkspace: wantLabels[sandbox.LabelWorkspace]}, []string{x.id}},
		{map[string]string{sandbox.LabelSandbox: y.id}, []string{y.id}},
		{map[string]string{sandbox.LabelSandbox: "sb_none"}, nil},
	} {
		list, err := b.List(ctx, tc.labels)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, i := range list {
			ids = append(ids, i.ID)
		}
		sort.Strings(ids)
		sort.Strings(tc.want)
		if diff := cmp.Diff(tc.want, ids); diff != "" {
			t.Errorf("List(%v) (-want +got):\n%s", tc.labels, diff)
		}
	}

	if out := x.mustSh(t, "id -u; id -g"); out != "1000\n1000\n" {
		t.Errorf("id -u, id -g: %q", out)
	}
	if res, _, _ := x.run(t, guest.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 || res.Signal != 0 {
		t.Errorf("true: %+v", res)
	}
	if res, _, _ := x.run(t, guest.ExecRequest{Argv: []string{"false"}}); res.ExitCode != 1 {
		t.Errorf("false: %+v", res)
	}

	// Stop ends every process of the jail, as the host counts them.
	ns := pidNS(t, x.rec.Pid)
	if n := len(inNS(ns)); n == 0 {
		t.Fatal("the host sees no process in the jail's pid namespace")
	}
	if err := b.Stop(ctx, x.id); err != nil {
		t.Fatal(err)
	}
	if left := inNS(ns); len(left) != 0 {
		t.Errorf("processes left in the jail's pid namespace after Stop: %v", left)
	}
	if got, err := b.Inspect(ctx, x.id); err != nil || got.State != sandbox.StateStopped {
		t.Errorf("Inspect after Stop: %+v, %v", got, err)
	}
	select {
	case <-x.conn.Done():
	case <-time.After(5 * time.Second):
		t.Error("the guest connection is still open after Stop")
	}
	// The other sandbox is untouched.
	if out := y.mustSh(t, "echo alive"); out != "alive\n" {
		t.Errorf("neighbour after Stop: %q", out)
	}

	if err := b.Remove(ctx, x.id); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(b, x.id); len(left) != 0 {
		t.Errorf("left after Remove: %v", left)
	}
	_, err = b.Inspect(ctx, x.id)
	wantClass(t, err, errdefs.ErrNotFound)
	wantClass(t, b.Stop(ctx, x.id), errdefs.ErrNotFound)
	if err := b.Remove(ctx, x.id); err != nil {
		t.Errorf("removing a removed sandbox: %v", err)
	}
	// Remove of a running sandbox kills it too.
	yns := pidNS(t, y.rec.Pid)
	if err := b.Remove(ctx, y.id); err != nil {
		t.Fatal(err)
	}
	if left := inNS(yns); len(left) != 0 {
		t.Errorf("processes left after Remove of a running sandbox: %v", left)
	}
	if left := leftovers(b, y.id); len(left) != 0 {
		t.Errorf("left after Remove: %v", left)
	}
}

// TestIsolation runs SECURITY.md A, B and G probes that need one ordinary
// sandbox, judged from the host where it can be.
func TestIsolation(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const tmpBytes = 8 << 20
	x := startBox(t, b, sandbox.Spec{Limits: sandbox.Limits{TmpBytes: tmpBytes}})

	t.Run("identity", func(t *testing.T) {
		out := x.mustSh(t, "id; grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
		for _, want := range []string{
			"uid=1000(agent) gid=1000(agent)",
			"Uid:\t1000\t1000\t1000\t1000", "Gid:\t1000\t1000\t1000\t1000",
			"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
			"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000",
			"NoNewPrivs:\t1", "Seccomp:\t2",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %q in:\n%s", want, out)
			}
		}
		if g := regexpLine(out, "Groups:"); strings.TrimSpace(strings.TrimPrefix(g, "Groups:")) != "" {
			t.Errorf("supplementary groups inside: %q", g)
		}
		// The host's view: every process of the jail runs as 1000:1000.
		for _, pid := range inNS(pidNS(t, x.rec.Pid)) {
			st, err := os.Stat("/proc/" + strconv.Itoa(pid))
			if err != nil {
				continue
			}
			if s := st.Sys().(*syscall.Stat_t); s.Uid != testUID || s.Gid != testGID {
				// bubblewrap's monitor is outside the pid namespace; anything
				// here is the sandbox's.
				t.Errorf("host sees jail process %d as %d:%d", pid, s.Uid, s.Gid)
			}
		}
		if out := x.mustSh(t, "hostname"); out != hostname(x.id)+"\n" {
			t.Errorf("hostname %q, want %q", out, hostname(x.id))
		}
	})

	t.Run("environment", func(t *testing.T) {
		res, out, _ := x.run(t, guest.ExecRequest{Argv: []string{"/bin/env"}, Env: []string{"ONLY=this"}})
		if res.ExitCode != 0 || out != "ONLY=this\n" {
			t.Errorf("env: %+v %q", res, out)
		}
		// Nothing anywhere in the sandbox holds the daemon's canary, nor the
		// guest's token (the guest's own environment is not readable).
		res, all := x.sh(t, "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; grep -rs "+canaryValue+" /proc/1/ /run /tmp /workspace; echo done")
		if strings.Contains(all, canaryValue) || strings.Contains(all, guest.TokenEnv) || strings.Contains(all, canaryEnv) {
			t.Errorf("the sandbox sees the daemon's canary or the guest token:\n%s", all)
		}
		// bubblewrap's monitor, outside the jail, got exactly the guest's
		// environment: where to read the token, not the token, and nothing
		// of the daemon.
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", x.rec.Monitor))
		if err != nil {
			t.Fatal(err)
		}
		vars := strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
		if want := guest.TokenFDEnv + "=" + strconv.Itoa(tokenFD); len(vars) != 1 || vars[0] != want {
			t.Errorf("bubblewrap's environment: %q, want [%s]", vars, want)
		}
	})

	t.Run("workspace", func(t *testing.T) {
		x.mustSh(t, "echo from-inside > /workspace/inside.txt && mkdir -p /workspace/d/e")
		st, err := os.Stat(filepath.Join(x.files, "inside.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if s := st.Sys().(*syscall.Stat_t); s.Uid != testUID || s.Gid != testGID {
			t.Errorf("file written inside is %d:%d on the host, want %d:%d", s.Uid, s.Gid, testUID, testGID)
		}
		if b, _ := os.ReadFile(filepath.Join(x.files, "inside.txt")); string(b) != "from-inside\n" {
			t.Errorf("host reads %q", b)
		}
		if err := os.WriteFile(filepath.Join(x.files, "host.txt"), []byte("from-host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := x.mustSh(t, "cat /workspace/host.txt"); out != "from-host\n" {
			t.Errorf("inside reads %q", out)
		}
		// A setuid copy of a root-owned shell gains nothing (A.2): nosuid
		// and no_new_privs.
		os.Mkdir(filepath.Join(x.files, "suid"), 0o755)
		copyFile(t, "/bin/busybox", filepath.Join(x.files, "suid", "busybox"), 0o755, 0)
		os.Chown(filepath.Join(x.files, "suid", "busybox"), 0, 0)
		if err := os.Chmod(filepath.Join(x.files, "suid", "busybox"), 0o755|os.ModeSetuid); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(filepath.Join(x.files, "suid", "busybox")); err != nil || st.Mode()&os.ModeSetuid == 0 {
			t.Fatalf("control: the copy is not setuid: %v %v", st.Mode(), err)
		}
		if out := x.mustSh(t, "/workspace/suid/busybox id -u"); out != "1000\n" {
			t.Errorf("a setuid-root binary in the workspace runs as %q", out)
		}
	})

	t.Run("mounts", func(t *testing.T) {
		out := x.mustSh(t, "cat /proc/self/mountinfo")
		type mount struct{ point, opts, fstype string }
		var got []mount
		for _, l := range lines(out) {
			f := strings.Fields(l)
			sep := slices.Index(f, "-")
			if len(f) < 6 || sep < 0 || sep+1 >= len(f) {
				t.Fatalf("mountinfo line %q", l)
			}
			got = append(got, mount{f[4], f[5], f[sep+1]})
		}
		points := map[string]mount{}
		for _, m := range got {
			points[m.point] = m
		}
		// Only declared mounts (B.14).
		wantPoints := []string{"/", "/proc", "/dev", "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
			"/dev/urandom", "/dev/tty", "/dev/pts", "/dev/shm", "/tmp", "/workspace", "/run",
			"/run/agentbox", "/run/agentbox-guest",
		}
		wantPoints = append(wantPoints, b.masks...)
		var gotPoints []string
		for p := range points {
			gotPoints = append(gotPoints, p)
		}
		// Covers of /proc entries this kernel lacks are not mounted.
		wantPoints = slices.DeleteFunc(wantPoints, func(p string) bool {
			if !strings.HasPrefix(p, "/proc/") {
				return false
			}
			_, ok := points[p]
			_, err := os.Lstat(p)
			return !ok && err != nil
		})
		sort.Strings(wantPoints)
		sort.Strings(gotPoints)
		if diff := cmp.Diff(wantPoints, gotPoints); diff != "" {
			t.Errorf("mount points (-want +got):\n%s", diff)
		}
		for _, c := range []struct {
			point string
			opts  []string
		}{
			{"/", []string{"ro", "nosuid", "nodev"}},
			{"/workspace", []string{"rw", "nosuid", "nodev"}},
			{"/tmp", []string{"rw", "nosuid", "nodev"}},
			{"/dev/shm", []string{"rw", "nosuid", "nodev"}},
			{"/dev", []string{"ro", "nosuid"}},
			{"/run", []string{"ro", "nosuid", "nodev"}},
			{"/run/agentbox-guest", []string{"ro", "nosuid", "nodev"}},
			{"/run/agentbox", []string{"nosuid", "nodev"}},
		} {
			opts := strings.Split(points[c.point].opts, ",")
			for _, o := range c.opts {
				if !slices.Contains(opts, o) {
					t.Errorf("%s is mounted %q, want %s", c.point, points[c.point].opts, o)
				}
			}
		}
	})

	t.Run("read-only outside workspace and tmp", func(t *testing.T) {
		for _, p := range []string{"/x", "/etc/x", "/bin/x", "/home/agent/x", "/run/x", "/run/agentbox-guest", "/dev/x", "/var/tmp/x", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"} {
			if res, out := x.sh(t, "echo x > "+p); res.ExitCode == 0 {
				t.Errorf("wrote %s: %s", p, out)
			}
		}
		x.mustSh(t, "echo ok > /tmp/ok && echo ok > /dev/shm/ok && echo ok > /workspace/ok")
		if res, out := x.sh(t, "mknod /tmp/null c 1 3"); res.ExitCode == 0 {
			t.Errorf("mknod worked: %s", out)
		}
		for _, p := range []string{"/proc/keys", "/proc/kcore", "/proc/timer_list", "/proc/1/mem", "/proc/1/environ", "/proc/1/maps"} {
			if res, _, errOut := x.run(t, guest.ExecRequest{Argv: []string{"cat", p}}); res.ExitCode == 0 {
				t.Errorf("%s is readable (stderr %q)", p, errOut)
			}
		}
	})

	t.Run("tmp is sized", func(t *testing.T) {
		out := x.mustSh(t, "df -k /tmp | tail -1")
		f := strings.Fields(out)
		if len(f) < 2 || f[1] != strconv.Itoa(tmpBytes/1024) {
			t.Errorf("df /tmp: %q, want %d KiB", out, tmpBytes/1024)
		}
		res, out2 := x.sh(t, fmt.Sprintf("dd if=/dev/zero of=/tmp/fill bs=1M count=%d", tmpBytes>>20+2))
		if res.ExitCode == 0 || !strings.Contains(out2, "No space left") {
			t.Errorf("filling /tmp past its size: %+v %q", res, out2)
		}
		x.mustSh(t, "rm /tmp/fill")
	})

	t.Run("no network but loopback", func(t *testing.T) {
		out := x.mustSh(t, "tail -n +3 /proc/net/dev | cut -d: -f1")
		if got := lines(out); !slices.Equal(got, []string{"lo"}) {
			t.Errorf("interfaces: %q", got)
		}
		// A host server on loopback sees nothing and the sandbox cannot
		// reach it.
		ln, err := netListen(t)
		if err != nil {
			t.Fatal(err)
		}
		res, out := x.sh(t, fmt.Sprintf("echo hi | nc -w 1 127.0.0.1 %d", ln.port))
		if res.ExitCode == 0 {
			t.Errorf("nc to the host's loopback worked: %q", out)
		}
		if n := ln.accepted(); n != 0 {
			t.Errorf("the host listener accepted %d connections from the sandbox", n)
		}
		if res, out := x.sh(t, "wget -q -T 2 -O - http://example.invalid/ || nslookup example.invalid"); res.ExitCode == 0 {
			t.Errorf("name lookup or HTTP worked: %q", out)
		}
	})

	t.Run("processes", func(t *testing.T) {
		// A host process with a marker in its command line: the host sees
		// it (the control), the sandbox must not.
		marker := "abmark" + randHex(6)
		sleep := exec.Command("sleep", "300")
		sleep.Args[0] = marker
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { sleep.Process.Kill(); sleep.Wait() }()
		waitFor(t, 5*time.Second, "control: the host to see its own marked process", func() bool {
			return len(withCmdline(marker)) > 0
		})
		// "[x]" so that grep does not find its own command line.
		pattern := marker[:len(marker)-1] + "[" + marker[len(marker)-1:] + "]"
		if res, out := x.sh(t, "grep -l '"+pattern+"' /proc/[0-9]*/cmdline"); res.ExitCode == 0 || strings.Contains(out, "cmdline") {
			t.Errorf("the sandbox sees the host's process: %q", out)
		}
		out := x.mustSh(t, "ls /proc | grep -E '^[0-9]+$'")
		if n := len(lines(out)); n == 0 || n > 12 {
			t.Errorf("the sandbox sees %d processes: %v", n, lines(out))
		}
		out = x.mustSh(t, "ps -o pid,user,args")
		for _, l := range lines(out)[1:] {
			if !strings.Contains(l, "agentbox-guest") && !strings.Contains(l, "ps -o") && !strings.Contains(l, "sh -c") {
				t.Errorf("unexpected process in the sandbox: %q", l)
			}
		}
		if out := x.mustSh(t, "cat /proc/1/comm"); out != "agentbox-guest\n" {
			t.Errorf("pid 1 is %q, want the guest", out)
		}
		// Nothing inside can kill the guest.
		x.sh(t, "kill -9 1; kill -TERM 1")
		if out := x.mustSh(t, "echo still"); out != "still\n" {
			t.Errorf("after kill -9 1: %q", out)
		}
	})

	t.Run("descriptors", func(t *testing.T) {
		// No descriptor a command inherits leads to the host (A.10).
		out := x.mustSh(t, "for f in /proc/self/fd/*; do echo \"$f $(readlink $f)\"; done")
		for _, l := range lines(out) {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			target := f[1]
			if strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:") || strings.HasPrefix(target, "/dev/") || strings.HasPrefix(target, "/proc/") || strings.HasPrefix(target, "anon_inode:") {
				continue
			}
			t.Errorf("inherited descriptor %s", l)
		}
		if res, out := x.sh(t, "ls -l /proc/1/root/ /proc/1/cwd/ /proc/1/exe"); res.ExitCode == 0 {
			t.Errorf("the guest's /proc links resolve: %s", out)
		}
	})

	t.Run("seccomp", func(t *testing.T) {
		probeSeccomp(t, x)
	})
}

// regexpLine returns the first line of s that starts with prefix.
func regexpLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// probeSeccomp runs the probe unconfined as the sandbox user (the control)
// and inside the sandbox, and checks that every call the filter refuses
// failed inside, and failed because of the filter where the control shows
// the call could otherwise work.
func probeSeccomp(t *testing.T, x *box) {
	control := runProbeOnHost(t)
	copyFile(t, probeBin, filepath.Join(x.files, "probe"), 0o755, testUID)
	res, out, errOut := x.run(t, guest.ExecRequest{Argv: []string{"/workspace/probe"}})
	if res.ExitCode != 0 {
		t.Fatalf("probe inside: %+v %s %s", res, out, errOut)
	}
	inside := parseProbe(out)
	want := map[string]string{"clone3": "ENOSYS", "getpid": "0", "socket_unix": "0"}
	for name, got := range inside {
		w, ok := want[name]
		if !ok {
			w = "EPERM"
		}
		if got != w {
			t.Errorf("%s inside: %s, want %s (control on the host: %s)", name, got, w, control[name])
		}
	}
	var strong []string
	for name, c := range control {
		if c != "EPERM" && inside[name] != c {
			strong = append(strong, name)
		}
	}
	sort.Strings(strong)
	t.Logf("the filter changed the outcome of %d calls against the unconfined control: %v", len(strong), strong)
	if len(strong) < 10 {
		t.Errorf("the control run shows the filter made a difference for only %d calls", len(strong))
	}
	// The 32-bit entries. x32 numbers pass the architecture check and are
	// refused by number; this kernel may have no ia32 entry at all, in
	// which case int $0x80 faults before seccomp sees it.
	for _, entry := range []string{"x32", "ia32"} {
		res, out, _ := x.run(t, guest.ExecRequest{Argv: []string{"/workspace/probe", entry}})
		ctl := probeEntryOnHost(t, entry)
		t.Logf("%s entry: inside %+v; unconfined control: %s", entry, res, ctl)
		if strings.Contains(out, "survived") || res.ExitCode == 0 {
			t.Errorf("%s entry: the process survived: %+v %q", entry, res, out)
		}
		if entry == "x32" && res.Signal != int(syscall.SIGSYS) {
			t.Errorf("x32 entry: killed by signal %d, want SIGSYS", res.Signal)
		}
		if entry == "ia32" && ctl == "survived" && res.Signal != int(syscall.SIGSYS) {
			t.Errorf("ia32 entry works on this host but the probe died of signal %d, not SIGSYS", res.Signal)
		}
	}
}

func parseProbe(out string) map[string]string {
	m := map[string]string{}
	for _, l := range lines(out) {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// runProbeOnHost runs the probe as the sandbox user with no filter.
func runProbeOnHost(t *testing.T) map[string]string {
	t.Helper()
	out, err := hostProbe(hostProbeBin(t))
	if err != nil {
		t.Fatalf("control probe: %v\n%s", err, out)
	}
	return parseProbe(out)
}

func probeEntryOnHost(t *testing.T, entry string) string {
	t.Helper()
	out, err := hostProbe(hostProbeBin(t), entry)
	if strings.Contains(out, "survived") {
		return "survived"
	}
	return fmt.Sprintf("died (%v)", err)
}

// hostProbeBin is a copy of the probe the sandbox user can run on the host.
func hostProbeBin(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "abl-probe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "probe")
	copyFile(t, probeBin, p, 0o755, testUID)
	return p
}
