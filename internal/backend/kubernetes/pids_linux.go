package kubernetes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupRoots are where a node's pod cgroups may be: cgroup v1's pids
// hierarchy, or the unified v2 one.
var cgroupRoots = []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"}

// limitPids writes the sandbox's pids limit into its pod's cgroup.
// Kubernetes has no per-pod pids limit in the pod spec (only the
// kubelet's podPidsLimit for every pod of the node), but the daemon runs
// on the pod's node and can set one: before Create returns, when the guest
// has started no command yet. The pod's cgroup is the directory named
// "pod"+UID (cgroupfs driver) or "...-pod"+UID+".slice" (systemd driver,
// UID's dashes as underscores) under kubepods.
func limitPids(uid string, pids int64) error {
	names := map[string]bool{
		"pod" + uid: true,
		"kubepods-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice":            true,
		"kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice":  true,
		"kubepods-besteffort-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice": true,
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
			if found == "" {
				continue
			}
			f := filepath.Join(found, "pids.max")
			if err := os.WriteFile(f, []byte(strconv.FormatInt(pids, 10)), 0); err != nil {
				return fmt.Errorf("pids limit %s: %w", f, err)
			}
			return nil
		}
	}
	return fmt.Errorf("no cgroup of pod %s on this host (is the daemon on the pod's node, in its cgroup namespace?)", uid)
}
