package docker

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.OOMCounter = (*Backend)(nil)

// cgroupRoot is where the host's cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// memCgroups caches, by container id, the memory cgroup directory of a
// running container, so that an exec's OOM check is one file read and no
// engine call. An entry goes when reading it fails (the container ended).
var memCgroups sync.Map

// OOMKills reads the oom_kill counter of the container's memory cgroup:
// runc puts the container's processes there, runsc its sentry and gofer,
// so under gVisor a count means the whole sandbox was killed. For a
// container that has ended the cgroup is gone; the engine then only
// remembers whether an OOM kill ended it, which counts as 1.
func (b *Backend) OOMKills(ctx context.Context, ref string) (uint64, error) {
	if dir, ok := memCgroups.Load(ref); ok {
		if n, err := readOOMKills(dir.(string)); err == nil {
			return n, nil
		}
		memCgroups.Delete(ref)
	}
	res, err := b.c.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("counting OOM kills of container %s: %w", short(ref), engineErr(err))
	}
	ctr := res.Container
	if ctr.Config == nil || !b.owns(ctr.Config.Labels) {
		return 0, fmt.Errorf("counting OOM kills of container %s: %w %s: %w", short(ref), errForeign, b.name, errdefs.ErrNotFound)
	}
	if ctr.State == nil || !ctr.State.Running || ctr.State.Pid <= 0 {
		if ctr.State != nil && ctr.State.OOMKilled {
			return 1, nil
		}
		return 0, nil
	}
	dir, err := memCgroupOf(ctr.State.Pid)
	if err != nil {
		return 0, fmt.Errorf("counting OOM kills of container %s: %w", short(ref), err)
	}
	n, err := readOOMKills(dir)
	if err != nil {
		return 0, fmt.Errorf("counting OOM kills of container %s: %w", short(ref), err)
	}
	memCgroups.Store(ref, dir)
	memCgroups.Store(ctr.ID, dir)
	return n, nil
}

// memCgroupOf finds the memory cgroup directory of process pid: the v1
// memory hierarchy's, or the v2 unified one's.
func memCgroupOf(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", err
	}
	var unified string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				return filepath.Join(cgroupRoot, "memory", parts[2]), nil
			}
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
	}
	if unified != "" && fileExists(filepath.Join(cgroupRoot, unified, "memory.events")) {
		return filepath.Join(cgroupRoot, unified), nil
	}
	return "", fmt.Errorf("process %d is in no memory cgroup", pid)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readOOMKills reads "oom_kill N" from a memory cgroup directory.
func readOOMKills(dir string) (uint64, error) {
	for _, f := range []string{"memory.oom_control", "memory.events"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
		return 0, fmt.Errorf("no oom_kill count in %s", filepath.Join(dir, f))
	}
	return 0, fmt.Errorf("memory cgroup %s: %w", dir, errdefs.ErrNotFound)
}
