package bench

// The density benchmark's teardown: every workspace removed through the
// daemon, a few at a time, within a deadline that grows with their
// number, and then a search for anything the run left on the machine.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Teardown's pace.
const (
	// teardownParallel is how many workspace removals run at once: the
	// engine's container removals, not the daemon, bound the pace, and
	// beyond this many they only queue in the engine.
	teardownParallel = 16
	// teardownBase and teardownPerWorkspace make the teardown's deadline:
	// 2,000 sandboxes get 10 minutes, about four times what they take.
	teardownBase         = 2 * time.Minute
	teardownPerWorkspace = 250 * time.Millisecond
	// releaseWait bounds the wait for the kernel to release what a
	// removal let go asynchronously (an autoclear loop device goes at
	// its last close).
	releaseWait = 10 * time.Second
)

// teardownDeadline is how long removing n workspaces may take.
func teardownDeadline(n int) time.Duration {
	return teardownBase + time.Duration(n)*teardownPerWorkspace
}

// DensityTeardown is how the run's workspaces and sandboxes went away.
type DensityTeardown struct {
	Workspaces int           `json:"workspaces"`
	Parallel   int           `json:"parallel"`
	Took       time.Duration `json:"took_ns"`
	Deadline   time.Duration `json:"deadline_ns"`
	// Error is the first removal that failed, if one did.
	Error string `json:"error,omitempty"`
	// Left is everything of the run still on the machine afterwards:
	// workspaces and sandbox rows the daemon knows, containers, their
	// cgroups, mounts and loop devices under the scratch dir, entries in
	// the data dir, and zombie processes that were not there before.
	Left []string `json:"left"`
}

// Clean says the teardown removed everything in time.
func (t DensityTeardown) Clean() bool { return t.Error == "" && len(t.Left) == 0 }

// hostState is what the teardown compares against: zombies that were
// there before the run are not the run's.
type hostState struct {
	zombies map[string]bool
}

func snapshotHost() hostState { return hostState{zombies: zombies()} }

// teardown removes every workspace the daemon knows, timed, and lists
// what is left. The daemon keeps running (close stops it).
func (d *daemonProc) teardown(ctx context.Context, before hostState, log io.Writer) DensityTeardown {
	td := DensityTeardown{Parallel: teardownParallel}
	fail := func(err error) DensityTeardown {
		if td.Error == "" {
			td.Error = err.Error()
		}
		return td
	}
	wss, err := d.c.ListWorkspaces(ctx, "", "")
	if err != nil {
		return fail(err)
	}
	td.Workspaces, td.Deadline = len(wss), teardownDeadline(len(wss))
	// The containers' full IDs, to find their cgroups once they are gone.
	ctrs, _, err := d.runContainers(ctx)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(log, "removing %d workspaces, %d at a time (deadline %s)\n", td.Workspaces, td.Parallel, td.Deadline)
	rctx, cancel := context.WithTimeout(ctx, td.Deadline)
	start := time.Now()
	err = d.removeAll(rctx, td.Parallel)
	td.Took = time.Since(start)
	cancel()
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(log, "  removed in %s\n", td.Took.Round(time.Millisecond))
	td.Left, err = d.leftovers(ctx)
	if err != nil {
		return fail(err)
	}
	// The kernel lets go of a loop device at its last close, which may
	// come a moment after the unmount.
	var host []string
	for deadline := time.Now().Add(releaseWait); ; {
		host = d.hostLeftovers(ctrs, before)
		if len(host) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	td.Left = append(td.Left, host...)
	return td
}

// hostLeftovers lists, beyond what leftovers finds: cgroups of the run's
// containers (any hierarchy, either cgroup driver), loop devices backed
// by a file under the scratch dir, and zombie processes that were not
// there before the run.
func (d *daemonProc) hostLeftovers(ctrs []string, before hostState) []string {
	var left []string
	for _, id := range ctrs {
		for _, pat := range []string{"/sys/fs/cgroup/*/docker/" + id, "/sys/fs/cgroup/docker/" + id,
			"/sys/fs/cgroup/*/system.slice/docker-" + id + ".scope", "/sys/fs/cgroup/system.slice/docker-" + id + ".scope"} {
			m, _ := filepath.Glob(pat)
			for _, p := range m {
				left = append(left, "cgroup "+p)
			}
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), d.root+"/") {
			left = append(left, "loop device /dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))+" ("+strings.TrimSpace(string(b))+")")
		}
	}
	for z := range zombies() {
		if !before.zombies[z] {
			left = append(left, "zombie process "+z)
		}
	}
	return left
}

// zombies lists the host's zombie processes as "pid (comm) parent ppid".
func zombies() map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[0] == "Z" {
			out[s[:i+1]+" parent "+f[1]] = true
		}
	}
	return out
}
