package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// checkOverlay: the overlay workspace driver. Listed in /proc/filesystems is not enough
// (the upper layer's file system may refuse, or a container may forbid mount), so as root
// it mounts a real overlay in a temporary directory under DataDir, writes through it and
// unmounts it. The mount happens in a private mount namespace of one OS thread, so that
// nothing leaks into the host's mount table even if the process dies halfway.
func checkOverlay(ctx context.Context, opts Options) Check {
	c := Check{Name: "overlayfs"}
	const fallback = "workspaces fall back to the copy driver"
	listed, err := procFilesystem("overlay")
	if err != nil {
		c.Status, c.Detail = StatusWarn, "reading /proc/filesystems: "+err.Error()
		return c
	}
	if !listed {
		c.Status, c.Detail = StatusMissing, "overlay not in /proc/filesystems; "+fallback
		c.Fix = "modprobe overlay (kernel needs CONFIG_OVERLAY_FS)"
		return c
	}
	if uid := os.Geteuid(); uid != 0 {
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("overlay listed in /proc/filesystems; test mount skipped: mounting needs root (running as uid %d)", uid)
		c.Fix = "run the doctor as root (as the daemon runs) to test a real mount"
		return c
	}
	dir, err := os.MkdirTemp(opts.DataDir, ".agentbox-doctor-overlay-")
	if err != nil {
		c.Status, c.Detail = StatusWarn, "overlay listed; cannot make a test directory: "+err.Error()
		c.Fix = "mkdir -p " + opts.DataDir
		return c
	}
	defer os.RemoveAll(dir)
	fsName := fsTypeName(dir)

	start := time.Now()
	err = overlayProbe(ctx, dir)
	took := time.Since(start)
	if err != nil {
		c.Status = StatusMissing
		c.Detail = fmt.Sprintf("overlay listed, but a test mount on %s (%s) failed: %v; %s", opts.DataDir, fsName, err, fallback)
		c.Fix = "put the data dir on ext4 or xfs, or use the copy driver"
		return c
	}
	c.Status = StatusOK
	c.Detail = fmt.Sprintf("overlay mounted, written through and unmounted in %s on %s (%s)", ms(took), opts.DataDir, fsName)
	return c
}

// overlayProbe mounts an overlay of dir/lower and dir/upper on dir/merged, checks that a
// lower file shows through and that a write lands in upper, and unmounts it.
func overlayProbe(ctx context.Context, dir string) error {
	lower, upper := filepath.Join(dir, "lower"), filepath.Join(dir, "upper")
	work, merged := filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "probe"), []byte("lower"), 0o600); err != nil {
		return err
	}
	return inPrivateMountNS(ctx, func() error {
		data := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
		if err := unix.Mount("overlay", merged, "overlay", 0, data); err != nil {
			return fmt.Errorf("mount -t overlay: %w", err)
		}
		err := func() error {
			got, err := os.ReadFile(filepath.Join(merged, "probe"))
			if err != nil {
				return fmt.Errorf("reading through the overlay: %w", err)
			}
			if string(got) != "lower" {
				return fmt.Errorf("reading through the overlay: got %q, want %q", got, "lower")
			}
			if err := os.WriteFile(filepath.Join(merged, "written"), []byte("upper"), 0o600); err != nil {
				return fmt.Errorf("writing through the overlay: %w", err)
			}
			if _, err := os.Stat(filepath.Join(upper, "written")); err != nil {
				return fmt.Errorf("write did not reach the upper layer: %w", err)
			}
			return nil
		}()
		uerr := unix.Unmount(merged, 0)
		if errors.Is(uerr, unix.EBUSY) {
			// A process forked while the mount existed may hold it for a
			// moment; that says nothing about overlay. Detach lazily.
			uerr = unix.Unmount(merged, unix.MNT_DETACH)
		}
		if uerr != nil {
			// The namespace dies with its thread, which drops the mount anyway.
			err = errors.Join(err, fmt.Errorf("unmount: %w", uerr))
		}
		return err
	})
}

// inPrivateMountNS runs f on an OS thread of its own that has left the process's mount
// namespace for a private copy. The thread is never unlocked, so the Go runtime retires
// it when f returns, and with it the namespace and any mount f left behind.
func inPrivateMountNS(ctx context.Context, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("unshare mount namespace: %w", err)
			return
		}
		// Without this, mounts would propagate back to the host's shared peer groups.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- fmt.Errorf("making mounts private: %w", err)
			return
		}
		errc <- f()
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func procFilesystem(name string) (bool, error) {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return true, nil
		}
	}
	return false, nil
}

// fsTypeName names the file system dir is on, for detail lines.
func fsTypeName(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown file system"
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case 0x2fc12fc1:
		return "zfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("file system 0x%x", uint32(st.Type))
}

// checkUserNS: bubblewrap and rootless sandboxes need user namespaces. The sysctls say
// whether they are allowed; an actual unshare says whether they work here (a container's
// seccomp profile, for one, may refuse them whatever the sysctls say).
func checkUserNS(ctx context.Context, _ Options) Check {
	c := Check{Name: "user-namespaces"}
	const enable = "sysctl -w user.max_user_namespaces=15000"
	raw, err := readTrim("/proc/sys/user/max_user_namespaces")
	if err != nil {
		c.Status, c.Detail = StatusMissing, "no /proc/sys/user/max_user_namespaces: kernel without user namespaces (CONFIG_USER_NS)"
		c.Fix = "use a kernel with CONFIG_USER_NS=y"
		return c
	}
	limit, err := strconv.Atoi(raw)
	if err != nil {
		c.Status, c.Detail = StatusWarn, fmt.Sprintf("max_user_namespaces %q: %v", raw, err)
		return c
	}
	if limit == 0 {
		c.Status, c.Detail, c.Fix = StatusMissing, "user namespaces disabled: user.max_user_namespaces=0", enable
		return c
	}
	parts := []string{"max_user_namespaces=" + raw}
	var warns, fixes []string
	if v, err := readTrim("/proc/sys/kernel/unprivileged_userns_clone"); err == nil {
		parts = append(parts, "unprivileged_userns_clone="+v)
		if v == "0" {
			warns = append(warns, "unprivileged users cannot create user namespaces")
			fixes = append(fixes, "sysctl -w kernel.unprivileged_userns_clone=1")
		}
	}
	if v, err := readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil {
		parts = append(parts, "apparmor_restrict_unprivileged_userns="+v)
		if v == "1" {
			warns = append(warns, "AppArmor restricts unprivileged user namespaces")
			fixes = append(fixes, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
		}
	}

	if _, err := exec.LookPath("unshare"); err != nil {
		parts = append(parts, "unshare not found, live test skipped")
		warns = append(warns, "not tested with a real unshare")
		fixes = append(fixes, "apt-get install -y util-linux")
	} else {
		start := time.Now()
		out, err := command(ctx, "unshare", "--user", "true")
		if err != nil {
			c.Status = StatusMissing
			c.Detail = strings.Join(parts, ", ") + fmt.Sprintf("; unshare --user true as uid %d failed: %s", os.Geteuid(), commandError(err, out))
			c.Fix = strings.Join(append(fixes, enable), "; ")
			return c
		}
		parts = append(parts, fmt.Sprintf("unshare --user true ok as uid %d in %s", os.Geteuid(), ms(time.Since(start))))
	}
	c.Detail = strings.Join(parts, ", ")
	c.Status = StatusOK
	if len(warns) > 0 {
		c.Status = StatusWarn
		c.Detail += "; " + strings.Join(warns, "; ")
		c.Fix = strings.Join(fixes, "; ")
	}
	return c
}

// limitControllers are the cgroup controllers that enforce a policy's CPU, memory and pids
// limits; without one of them that limit cannot be applied.
var limitControllers = []string{"cpu", "memory", "pids"}

// checkCgroups: the local backend applies limits through cgroups, and the engine does too.
// It tells the layout (unified v2, v1, or hybrid v1 with a cgroup2 mount beside it) by the
// file system magic, and which controllers each side offers.
func checkCgroups(_ context.Context, _ Options) Check {
	c := Check{Name: "cgroups"}
	const root, unified = "/sys/fs/cgroup", "/sys/fs/cgroup/unified"
	rootType, err := statfsType(root)
	if err != nil {
		c.Status, c.Detail = StatusMissing, "statfs "+root+": "+err.Error()
		c.Fix = "mount -t cgroup2 none " + root
		return c
	}
	var layout string
	var v1, v2 []string
	switch rootType {
	case unix.CGROUP2_SUPER_MAGIC:
		v2 = cgroup2Controllers(root)
		layout = "v2 (unified) at " + root + ", controllers [" + strings.Join(v2, " ") + "]"
	case unix.TMPFS_MAGIC, unix.CGROUP_SUPER_MAGIC:
		v1 = cgroup1Controllers()
		layout = "v1 at " + root + ", controllers [" + strings.Join(v1, " ") + "]"
		if t, err := statfsType(unified); err == nil && t == unix.CGROUP2_SUPER_MAGIC {
			v2 = cgroup2Controllers(unified)
			layout = "hybrid: " + layout + "; v2 at " + unified + ", controllers [" + strings.Join(v2, " ") + "]"
		}
	default:
		c.Status = StatusMissing
		c.Detail = fmt.Sprintf("%s is not a cgroup file system (magic 0x%x)", root, uint32(rootType))
		c.Fix = "mount -t cgroup2 none " + root
		return c
	}

	have := append(slices.Clone(v1), v2...)
	var missing []string
	for _, want := range limitControllers {
		if !slices.Contains(have, want) {
			missing = append(missing, want)
		}
	}
	c.Detail = layout
	if len(missing) > 0 {
		c.Status = StatusWarn
		c.Detail += "; missing " + strings.Join(missing, ", ") + ": those limits cannot be enforced"
		c.Fix = "enable the " + strings.Join(missing, ", ") + " controllers (kernel config, no cgroup_disable= on the kernel command line, and mounted)"
		return c
	}
	// On v1 the local backend moves a thread between cgroups for every sandbox it
	// starts; without favordynmods each move first waits for an RCU grace period.
	if len(v1) > 0 && !favorDynmods() {
		c.Status = StatusWarn
		c.Detail += "; cgroup migrations wait for an RCU grace period (favordynmods is off): each local sandbox create pays about 5-15 ms"
		if len(v2) > 0 || rootType == unix.TMPFS_MAGIC {
			c.Fix = "mount -o remount,favordynmods " + unified + " (scripts/setup.sh does this)"
		} else {
			c.Fix = "boot with cgroup_favordynmods=true"
		}
		return c
	}
	c.Status = StatusOK
	return c
}

// favorDynmods tells whether any cgroup hierarchy is mounted with favordynmods: the flag
// switches the kernel's one cgroup_threadgroup_rwsem to writer-friendly mode for all of
// them (fork and exit pay a little, migrations no longer wait for a grace period).
func favorDynmods() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		_, post, ok := strings.Cut(line, " - ")
		if f := strings.Fields(post); ok && len(f) >= 3 && (f[0] == "cgroup" || f[0] == "cgroup2") &&
			slices.Contains(strings.Split(f[2], ","), "favordynmods") {
			return true
		}
	}
	return false
}

func statfsType(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}

// cgroup2Controllers lists the controllers a cgroup2 root offers (empty, not nil, when it
// offers none: in a hybrid layout v1 usually holds them all).
func cgroup2Controllers(root string) []string {
	s, err := readTrim(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return []string{}
	}
	out := strings.Fields(s)
	slices.Sort(out)
	return out
}

// cgroup1Controllers lists the enabled controllers that are bound to a v1 hierarchy
// (a hierarchy id of 0 in /proc/cgroups means unbound, or bound to cgroup2).
func cgroup1Controllers() []string {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return []string{}
	}
	out := []string{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[1] != "0" && f[3] == "1" {
			out = append(out, f[0])
		}
	}
	slices.Sort(out)
	return out
}

// landlockFeatures says what each Landlock ABI version added.
var landlockFeatures = []string{
	1: "filesystem access",
	2: "file reparenting",
	3: "truncate",
	4: "TCP bind/connect",
	5: "device ioctl",
	6: "IPC scoping",
	7: "audit logging",
}

// checkLandlock asks the kernel for its Landlock ABI version: the local backend confines
// the filesystem with it.
func checkLandlock(_ context.Context, _ Options) Check {
	c := Check{Name: "landlock"}
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch errno {
	case 0:
		c.Status = StatusOK
		c.Detail = fmt.Sprintf("landlock ABI %d", abi)
		if n := int(abi); n >= 1 && n < len(landlockFeatures) {
			c.Detail += " (up to " + landlockFeatures[n] + ")"
		}
	case unix.ENOSYS:
		c.Status, c.Detail = StatusMissing, "landlock_create_ruleset: ENOSYS: kernel built without Landlock"
		c.Fix = "use a kernel with CONFIG_SECURITY_LANDLOCK=y (5.13 or later)"
	case unix.EOPNOTSUPP:
		c.Status, c.Detail = StatusMissing, "landlock_create_ruleset: EOPNOTSUPP: Landlock built in but not enabled at boot"
		c.Fix = "add landlock to the lsm= kernel parameter"
	default:
		c.Status, c.Detail = StatusMissing, "landlock_create_ruleset: "+errno.Error()
		c.Fix = "use a kernel with Landlock enabled"
	}
	return c
}

// seccompNeeds are the filter return actions the local backend's filters use.
var seccompNeeds = []string{"allow", "errno", "kill_process"}

// checkSeccomp: the local backend installs a seccomp filter on every sandbox.
func checkSeccomp(_ context.Context, _ Options) Check {
	c := Check{Name: "seccomp"}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		c.Status, c.Detail = StatusWarn, "reading /proc/self/status: "+err.Error()
		return c
	}
	mode, filters := "", ""
	for line := range strings.Lines(string(status)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Seccomp":
			mode = strings.TrimSpace(v)
		case "Seccomp_filters":
			filters = strings.TrimSpace(v)
		}
	}
	if mode == "" {
		c.Status, c.Detail = StatusMissing, "no Seccomp line in /proc/self/status: kernel without seccomp"
		c.Fix = "use a kernel with CONFIG_SECCOMP_FILTER=y"
		return c
	}
	switch mode {
	case "0":
		c.Detail = "this process unfiltered (mode 0)"
	case "1":
		c.Detail = "this process in strict mode (mode 1)"
	case "2":
		c.Detail = "this process already filtered (mode 2, " + filters + " filters; sandbox filters stack on top)"
	default:
		c.Detail = "mode " + mode
	}
	avail, err := readTrim("/proc/sys/kernel/seccomp/actions_avail")
	if err != nil {
		c.Status = StatusWarn
		c.Detail += "; no /proc/sys/kernel/seccomp/actions_avail (kernel older than 4.14?): filter actions unknown"
		c.Fix = "use a kernel 4.14 or later"
		return c
	}
	actions := strings.Fields(avail)
	c.Detail += "; actions [" + strings.Join(actions, " ") + "]"
	var missing []string
	for _, a := range seccompNeeds {
		if !slices.Contains(actions, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		c.Status = StatusWarn
		c.Detail += "; missing " + strings.Join(missing, ", ")
		c.Fix = "use a newer kernel with seccomp filter actions " + strings.Join(seccompNeeds, ", ")
		return c
	}
	c.Status = StatusOK
	return c
}
