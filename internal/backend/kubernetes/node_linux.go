package kubernetes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/anonmount"
)

// The daemon runs on its pods' node (Options.Node), so it can do there
// what the pod spec cannot say: give each sandbox its own pids limit, and
// take away the writable host file the kubelet binds into every container.

// cgroupRoots are where a node's pod cgroups may be: cgroup v1's pids
// hierarchy, or the unified v2 one.
var cgroupRoots = []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"}

// podCgroup finds the pids cgroup of the pod with uid: the directory named
// "pod"+UID (cgroupfs driver) or "kubepods[-QOS]-pod"+UID+".slice"
// (systemd driver, UID's dashes as underscores) under kubepods.
func podCgroup(uid string) (string, error) {
	u := strings.ReplaceAll(uid, "-", "_")
	names := map[string]bool{
		"pod" + uid:                              true,
		"kubepods-pod" + u + ".slice":            true,
		"kubepods-burstable-pod" + u + ".slice":  true,
		"kubepods-besteffort-pod" + u + ".slice": true,
	}
	for _, root := range cgroupRoots {
		for _, top := range []string{"kubepods", "kubepods.slice"} {
			base := filepath.Join(root, top)
			if _, err := os.Stat(base); err != nil {
				continue
			}
			var found string
			errFound := errors.New("found")
			filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				if names[d.Name()] {
					found = p
					return errFound
				}
				// Pod cgroups sit at most two levels down (QoS class, pod).
				if strings.Count(strings.TrimPrefix(p, base), "/") >= 2 {
					return filepath.SkipDir
				}
				return nil
			})
			if found != "" {
				return found, nil
			}
		}
	}
	return "", fmt.Errorf("no cgroup of pod %s on this host (is the daemon on the pod's node, in its cgroup namespace?)", uid)
}

// limitPids writes the sandbox's pids limit into its pod's cgroup dir.
// Kubernetes has no per-pod pids limit in the pod spec (only the
// kubelet's podPidsLimit for every pod of the node). It runs before Create
// returns, when the guest has started no command yet.
func limitPids(dir string, pids int64) error {
	f := filepath.Join(dir, "pids.max")
	if err := os.WriteFile(f, []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
		return fmt.Errorf("pids limit %s: %w", f, err)
	}
	return nil
}

// containerPids are the host pids in the cgroup of the container with id
// (a CRI container id, without the "containerd://") of the pod whose
// cgroup is dir.
func containerPids(dir, id string) ([]int, error) {
	for _, name := range []string{id, "cri-containerd-" + id + ".scope", "crio-" + id + ".scope", "docker-" + id + ".scope"} {
		b, err := os.ReadFile(filepath.Join(dir, name, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids, nil
	}
	return nil, fmt.Errorf("no cgroup of container %s in %s", id, dir)
}

// terminationLog is where the kubelet binds the container's termination
// message file (the API defaults terminationMessagePath to it).
const terminationLog = "/dev/termination-log"

// dropTerminationLog takes the kubelet's termination message file out of
// the container whose process pid is: the kubelet creates it on the node's
// disk, mode 0666, and binds it read-write into every container, where a
// command could fill the node's disk through it outside every quota (and
// its bind names a host path, SECURITY.md H45). The file is unmounted in
// the container's mount namespace and its mount point removed from the
// container's /dev; the kubelet still finds its own file when the pod
// ends. It runs before Create returns, when the guest has started no
// command yet.
func dropTerminationLog(pid int) error {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return fmt.Errorf("the container's mount namespace: %w", err)
	}
	defer ns.Close()
	// The thread that enters the container's mount namespace is never
	// handed back to the Go runtime (see anonmount.OnPrivateThread).
	return anonmount.OnPrivateThread(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("entering the container's mount namespace: %w", err)
		}
		if err := unix.Unmount(terminationLog, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s in the container: %w", terminationLog, err)
		}
		if err := unix.Unlink(terminationLog); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing %s from the container's /dev: %w", terminationLog, err)
		}
		return nil
	})
}
