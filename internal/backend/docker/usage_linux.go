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
	"time"

	"github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

var _ sandbox.UsageReader = (*Backend)(nil)

// ReadUsage reads the CPU time and memory high-water mark of a running
// container's cgroups (runc: the container's processes; runsc: its
// sentry and gofer). A container that has stopped has no cgroup left.
func (b *Backend) ReadUsage(ctx context.Context, ref string) (sandbox.Usage, error) {
	res, err := b.c.ContainerInspect(ctx, ref, client.ContainerInspectOptions{})
	if err != nil {
		return sandbox.Usage{}, fmt.Errorf("reading usage of container %s: %w", short(ref), engineErr(err))
	}
	ctr := res.Container
	if ctr.Config == nil || !b.owns(ctr.Config.Labels) {
		return sandbox.Usage{}, fmt.Errorf("reading usage of container %s: %w %s: %w", short(ref), errForeign, b.name, errdefs.ErrNotFound)
	}
	if ctr.State == nil || !ctr.State.Running || ctr.State.Pid <= 0 {
		return sandbox.Usage{}, fmt.Errorf("reading usage of container %s: it is not running: %w", short(ref), errdefs.ErrNotFound)
	}
	u, err := cgroupUsage(ctr.State.Pid)
	if err != nil {
		return u, fmt.Errorf("reading usage of container %s: %w", short(ref), err)
	}
	return u, nil
}

// cgroupUsage reads the usage of the cgroups of process pid: the v1
// cpuacct and memory hierarchies', or the v2 unified one's.
func cgroupUsage(pid int) (sandbox.Usage, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return sandbox.Usage{}, err
	}
	v1 := map[string]string{}
	unified := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = filepath.Join(cgroupRoot, parts[1], parts[2])
		}
	}
	var u sandbox.Usage
	if dir, ok := v1["cpuacct"]; ok {
		n, err := readInt(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return u, err
		}
		u.CPU = time.Duration(n)
		if mem, ok := v1["memory"]; ok {
			u.MemoryPeakBytes, _ = readInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
		}
		return u, nil
	}
	if unified == "" {
		return u, fmt.Errorf("process %d is in no cpu accounting cgroup", pid)
	}
	dir := filepath.Join(cgroupRoot, unified)
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return u, fmt.Errorf("%s: %w", filepath.Join(dir, "cpu.stat"), err)
			}
			u.CPU = time.Duration(n) * time.Microsecond
		}
	}
	// memory.peak exists from Linux 5.19.
	u.MemoryPeakBytes, _ = readInt(filepath.Join(dir, "memory.peak"))
	return u, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
