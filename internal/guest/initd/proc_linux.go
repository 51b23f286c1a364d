package initd

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// procEntry is one process of the process table.
type procEntry struct {
	pid, ppid int
	live      bool // not a zombie or dead
}

// procTable reads every process's parent and state from /proc.
func procTable() ([]procEntry, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading process table: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("reading process table: %w", err)
	}
	out := make([]procEntry, 0, len(names))
	var buf [512]byte
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		ppid, state, ok := readStat(pid, buf[:])
		if !ok {
			continue // gone meanwhile
		}
		out = append(out, procEntry{pid: pid, ppid: ppid, live: state != 'Z' && state != 'X' && state != 'x'})
	}
	return out, nil
}

// readStat returns the parent pid and state letter of pid.
func readStat(pid int, buf []byte) (ppid int, state byte, ok bool) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	n, err := syscall.Read(fd, buf)
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return 0, 0, false
	}
	b := buf[:n]
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses,
	// so parse from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 > len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return ppid, f[0][0], true
}

// liveDescendants lists the live processes below root, skipping the
// subtrees of the processes skip says to keep.
func liveDescendants(table []procEntry, root int, skip func(pid int) bool) []int {
	children := make(map[int][]procEntry, len(table))
	for _, e := range table {
		children[e.ppid] = append(children[e.ppid], e)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if c.pid == root || (skip != nil && skip(c.pid)) {
				continue
			}
			if c.live {
				out = append(out, c.pid)
			}
			queue = append(queue, c.pid)
		}
	}
	return out
}

// killTreeTimeout bounds how long killing a tree may take (a process in
// uninterruptible sleep cannot die at once).
const killTreeTimeout = 10 * time.Second

// killTree sends SIGKILL to every live descendant of root (except the
// subtrees skip keeps) until none is left. SIGKILL also ends stopped
// processes. A process that forks while this runs has its child found by
// the next pass; a process that already got SIGKILL cannot fork any more,
// so the passes converge. Zombies are left to their reaper.
func killTree(root int, skip func(pid int) bool) error {
	deadline := time.Now().Add(killTreeTimeout)
	pause := 50 * time.Microsecond
	for {
		table, err := procTable()
		if err != nil {
			return err
		}
		pids := liveDescendants(table, root, skip)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("killing the process tree of %d: %d processes still alive after %s", root, len(pids), killTreeTimeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}

// signalTree sends sig, then SIGCONT so that stopped processes see it, to
// every live descendant of root once.
func signalTree(root int, sig syscall.Signal) error {
	table, err := procTable()
	if err != nil {
		return err
	}
	for _, p := range liveDescendants(table, root, nil) {
		syscall.Kill(p, sig)
		syscall.Kill(p, syscall.SIGCONT)
	}
	return nil
}
