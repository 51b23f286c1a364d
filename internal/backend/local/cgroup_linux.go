package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// cgroupVersion is which cgroup API the host offers for the limits.
type cgroupVersion int

const (
	cgroupV1 cgroupVersion = 1
	cgroupV2 cgroupVersion = 2
)

func (v cgroupVersion) String() string { return "v" + strconv.Itoa(int(v)) }

// v1Controllers are the cgroup v1 controllers a sandbox gets a cgroup in.
// The first three carry the limits and are required; freezer (Pause) and a
// separately mounted cpuacct (CPU accounting) are used when present.
var v1Controllers = []struct {
	name     string
	required bool
}{
	{"memory", true},
	{"pids", true},
	{"cpu", true},
	{"freezer", false},
	{"cpuacct", false},
}

// v2Controllers must be enabled for the sandboxes' parent cgroup.
var v2Controllers = []string{"memory", "pids", "cpu"}

// cgroups is the host's cgroup layout, detected once by New.
type cgroups struct {
	version cgroupVersion
	// root is the cgroup file system mount ("/sys/fs/cgroup").
	root string
	// parent is the name of the cgroup under which every sandbox gets one.
	parent string
	// hier maps a v1 controller to its hierarchy's mount point. Controllers
	// mounted together ("cpu,cpuacct") share one; each hierarchy is listed
	// once in dirs order.
	hier  map[string]string
	hiers []string
}

// detectCgroups finds the cgroup version at root and checks that the
// controllers the limits need are there. A hybrid host (v1 controllers, an
// empty cgroup2 at root/unified) is v1.
func detectCgroups(root, parent string) (*cgroups, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return nil, fmt.Errorf("cgroup file system at %s: %w", root, err)
	}
	cg := &cgroups{root: root, parent: parent, hier: map[string]string{}}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		cg.version = cgroupV2
		avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("cgroup v2 at %s: %w", root, err)
		}
		have := strings.Fields(string(avail))
		for _, c := range v2Controllers {
			if !contains(have, c) {
				return nil, fmt.Errorf("cgroup v2 at %s offers no %s controller (has %q)", root, c, have)
			}
		}
		return cg, nil
	}
	cg.version = cgroupV1
	seen := map[string]bool{}
	for _, c := range v1Controllers {
		dir := filepath.Join(root, c.name)
		real, err := filepath.EvalSymlinks(dir)
		var cst unix.Statfs_t
		if err == nil {
			err = unix.Statfs(real, &cst)
		}
		if err != nil || cst.Type != unix.CGROUP_SUPER_MAGIC {
			if c.required {
				return nil, fmt.Errorf("no cgroup v1 %s controller mounted at %s", c.name, dir)
			}
			continue
		}
		cg.hier[c.name] = real
		if !seen[real] {
			seen[real] = true
			cg.hiers = append(cg.hiers, real)
		}
	}
	return cg, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dirs are the sandbox's cgroup directories, one per hierarchy.
func (cg *cgroups) dirs(id string) []string {
	if cg.version == cgroupV2 {
		return []string{filepath.Join(cg.root, cg.parent, id)}
	}
	out := make([]string, 0, len(cg.hiers))
	for _, h := range cg.hiers {
		out = append(out, filepath.Join(h, cg.parent, id))
	}
	return out
}

// dir is the sandbox's cgroup that holds controller c's files.
func (cg *cgroups) dir(id, c string) string {
	if cg.version == cgroupV2 {
		return filepath.Join(cg.root, cg.parent, id)
	}
	h, ok := cg.hier[c]
	if !ok {
		return ""
	}
	return filepath.Join(h, cg.parent, id)
}

// census is the directory whose cgroup.procs lists every process of the
// sandbox: pids is the controller every process is charged to.
func (cg *cgroups) census(id string) string { return cg.dir(id, "pids") }

// ensureParent creates the sandboxes' parent cgroup (and, on v2, enables
// the controllers for it and below).
func (cg *cgroups) ensureParent() error {
	if cg.version == cgroupV2 {
		ctl := "+" + strings.Join(v2Controllers, " +")
		if err := writeFile(filepath.Join(cg.root, "cgroup.subtree_control"), ctl); err != nil {
			return fmt.Errorf("enabling %s at the cgroup root: %w", ctl, err)
		}
		p := filepath.Join(cg.root, cg.parent)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := writeFile(filepath.Join(p, "cgroup.subtree_control"), ctl); err != nil {
			return fmt.Errorf("enabling %s in %s: %w", ctl, p, err)
		}
		return nil
	}
	for _, h := range cg.hiers {
		if err := os.Mkdir(filepath.Join(h, cg.parent), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// create makes the sandbox's cgroups and writes its limits. On error it
// removes what it made.
func (cg *cgroups) create(id string, l sandbox.Limits) (err error) {
	if err := cg.ensureParent(); err != nil {
		return fmt.Errorf("cgroup parent %s: %w", cg.parent, err)
	}
	var made []string
	defer func() {
		if err != nil {
			for i := len(made) - 1; i >= 0; i-- {
				os.Remove(made[i])
			}
		}
	}()
	for _, d := range cg.dirs(id) {
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup %s already exists", d)
			}
			return err
		}
		made = append(made, d)
	}
	for _, w := range cg.limitFiles(id, l) {
		if w.optional {
			if _, err := os.Stat(w.path); err != nil {
				continue
			}
		}
		if err := writeFile(w.path, w.value); err != nil {
			return fmt.Errorf("setting %s: %w", w.path, err)
		}
	}
	return nil
}

type cgroupWrite struct {
	path, value string
	optional    bool
}

// cfsPeriod is the CPU bandwidth period; the quota is CPUs times it.
const cfsPeriod = 100000

// limitFiles are the writes that apply l, in order.
func (cg *cgroups) limitFiles(id string, l sandbox.Limits) []cgroupWrite {
	quota := int64(math.Round(l.CPUs * cfsPeriod))
	quota = max(quota, 1000) // the kernel's minimum quota is 1ms
	mem := strconv.FormatInt(l.MemoryBytes, 10)
	pids := strconv.FormatInt(l.Pids, 10)
	if cg.version == cgroupV2 {
		d := cg.dir(id, "")
		return []cgroupWrite{
			{path: filepath.Join(d, "memory.max"), value: mem},
			// No swap: memory.max is the whole budget (sandbox.Limits).
			{path: filepath.Join(d, "memory.swap.max"), value: "0", optional: true},
			{path: filepath.Join(d, "pids.max"), value: pids},
			{path: filepath.Join(d, "cpu.max"), value: fmt.Sprintf("%d %d", quota, cfsPeriod)},
		}
	}
	m, p, c := cg.dir(id, "memory"), cg.dir(id, "pids"), cg.dir(id, "cpu")
	return []cgroupWrite{
		{path: filepath.Join(m, "memory.limit_in_bytes"), value: mem},
		// memsw (memory+swap) exists when swap accounting is on; it must
		// not be below limit_in_bytes, hence the order.
		{path: filepath.Join(m, "memory.memsw.limit_in_bytes"), value: mem, optional: true},
		{path: filepath.Join(m, "memory.swappiness"), value: "0", optional: true},
		{path: filepath.Join(p, "pids.max"), value: pids},
		{path: filepath.Join(c, "cpu.cfs_period_us"), value: strconv.Itoa(cfsPeriod)},
		{path: filepath.Join(c, "cpu.cfs_quota_us"), value: strconv.FormatInt(quota, 10)},
	}
}

// procs lists the processes in the sandbox's cgroup.
func (cg *cgroups) procs(id string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(cg.census(id), "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// kill SIGKILLs every process in the sandbox's cgroup until none is left
// or within passes. A process cannot leave its cgroup (the sandbox sees no
// cgroup file system) and killing the pid namespace's init takes its whole
// namespace along, so a few passes suffice; v2 does it in one write.
func (cg *cgroups) kill(id string, within time.Duration) error {
	if cg.version == cgroupV2 {
		p := filepath.Join(cg.dir(id, ""), "cgroup.kill")
		if err := writeFile(p, "1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	deadline := time.Now().Add(within)
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		pids, err := cg.procs(id)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes still in cgroup %s after %s", len(pids), cg.census(id), within)
		}
		member := "/" + cg.parent + "/" + id + "\n"
		for _, pid := range pids {
			killPid(pid, func() bool {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
				return err == nil && bytes.Contains(b, []byte(member))
			})
		}
		time.Sleep(delay)
	}
}

// remove deletes the sandbox's cgroups; missing ones are not an error.
func (cg *cgroups) remove(id string) error {
	var errs []error
	for _, d := range cg.dirs(id) {
		// A cgroup whose last process just died may still be busy for a
		// moment while the kernel finishes tearing it down.
		var err error
		for i := 0; i < 50; i++ {
			err = unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(time.Duration(i+1) * time.Millisecond)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// exists reports whether any of the sandbox's cgroups is there.
func (cg *cgroups) exists(id string) bool {
	for _, d := range cg.dirs(id) {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// freeze stops (or thaws) every process of the sandbox.
func (cg *cgroups) freeze(id string, frozen bool) error {
	if cg.version == cgroupV2 {
		v := map[bool]string{true: "1", false: "0"}[frozen]
		return writeFile(filepath.Join(cg.dir(id, ""), "cgroup.freeze"), v)
	}
	d := cg.dir(id, "freezer")
	if d == "" {
		return fmt.Errorf("no cgroup v1 freezer controller")
	}
	v := map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]
	return writeFile(filepath.Join(d, "freezer.state"), v)
}

// Usage is what the kernel has counted for one sandbox's cgroups.
type Usage struct {
	// MemoryBytes is the memory charged now, page cache and tmpfs included.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryPeakBytes is the most ever charged.
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	// OOMKills counts processes the kernel killed for the memory limit.
	OOMKills int64 `json:"oom_kills"`
	// Pids is the number of processes and threads now.
	Pids int64 `json:"pids"`
	// PidsLimitHits counts forks refused by the pids limit.
	PidsLimitHits int64 `json:"pids_limit_hits"`
	// CPU is the CPU time used.
	CPU time.Duration `json:"cpu_ns"`
	// Throttled counts CPU periods in which the quota ran out.
	Throttled int64 `json:"throttled_periods"`
}

// usage reads the counters of the sandbox's cgroups.
func (cg *cgroups) usage(id string) (Usage, error) {
	var u Usage
	var err error
	num := func(path string) int64 {
		if err != nil {
			return 0
		}
		var b []byte
		if b, err = os.ReadFile(path); err != nil {
			return 0
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return -1
		}
		var n int64
		n, err = strconv.ParseInt(s, 10, 64)
		return n
	}
	key := func(path, k string) int64 {
		if err != nil {
			return 0
		}
		var kv map[string]int64
		if kv, err = readKeyed(path); err != nil {
			return 0
		}
		return kv[k]
	}
	if cg.version == cgroupV2 {
		d := cg.dir(id, "")
		u.MemoryBytes = num(filepath.Join(d, "memory.current"))
		if _, serr := os.Stat(filepath.Join(d, "memory.peak")); serr == nil {
			u.MemoryPeakBytes = num(filepath.Join(d, "memory.peak"))
		}
		u.OOMKills = key(filepath.Join(d, "memory.events"), "oom_kill")
		u.Pids = num(filepath.Join(d, "pids.current"))
		u.PidsLimitHits = key(filepath.Join(d, "pids.events"), "max")
		u.CPU = time.Duration(key(filepath.Join(d, "cpu.stat"), "usage_usec")) * time.Microsecond
		u.Throttled = key(filepath.Join(d, "cpu.stat"), "nr_throttled")
		return u, err
	}
	m, p, c := cg.dir(id, "memory"), cg.dir(id, "pids"), cg.dir(id, "cpu")
	u.MemoryBytes = num(filepath.Join(m, "memory.usage_in_bytes"))
	u.MemoryPeakBytes = num(filepath.Join(m, "memory.max_usage_in_bytes"))
	u.OOMKills = key(filepath.Join(m, "memory.oom_control"), "oom_kill")
	u.Pids = num(filepath.Join(p, "pids.current"))
	u.PidsLimitHits = key(filepath.Join(p, "pids.events"), "max")
	u.Throttled = key(filepath.Join(c, "cpu.stat"), "nr_throttled")
	if a := cg.dir(id, "cpuacct"); a != "" {
		u.CPU = time.Duration(num(filepath.Join(a, "cpuacct.usage")))
	}
	return u, err
}

// readKeyed parses a "key value" per line cgroup file.
func readKeyed(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				out[f[0]] = n
			}
		}
	}
	return out, nil
}

// threadCgroups returns the v1 cgroup (relative path) of the calling
// thread in each of cg's hierarchies, from /proc/thread-self/cgroup.
func (cg *cgroups) threadCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	byCtrl := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			byCtrl[c] = parts[2]
		}
	}
	out := map[string]string{}
	for c, h := range cg.hier {
		rel, ok := byCtrl[c]
		if !ok {
			return nil, fmt.Errorf("this thread is in no %s cgroup", c)
		}
		out[h] = rel
	}
	return out, nil
}

// moveThread moves the calling thread (v1 only: v1 cgroups hold threads)
// into the given cgroup of each hierarchy.
func moveThread(tid int, dirs []string) error {
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "tasks"), strconv.Itoa(tid)); err != nil {
			return fmt.Errorf("moving thread %d to cgroup %s: %w", tid, d, err)
		}
	}
	return nil
}

// writeFile writes a cgroup control file in one write(2), as the kernel
// wants it, without creating it.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
