package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// recordFile is the state of one sandbox in StateDir/<id>/. It is what
// Inspect and List read, and what a daemon restarted after a crash (whose
// sandboxes died with it) uses to find and remove the leftovers.
const recordFile = "sandbox.json"

// record is one sandbox as the backend made it.
type record struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels"`
	Image  string            `json:"image"`
	Rootfs string            `json:"rootfs"`
	Spec   sandbox.Spec      `json:"spec"`
	UID    int               `json:"uid"`
	GID    int               `json:"gid"`
	// Pid is the jail's init (the guest, PID 1 in the sandbox) as the host
	// sees it; PidStart is its start time in clock ticks after boot, so that
	// a reused pid is never mistaken for it.
	Pid      int    `json:"pid"`
	PidStart uint64 `json:"pid_start"`
	// Monitor is bubblewrap's process outside the jail.
	Monitor int       `json:"monitor_pid"`
	Cgroups []string  `json:"cgroups"`
	Created time.Time `json:"created"`
}

func writeRecord(dir string, r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}

// readRecord reads dir's record; a missing one is fs.ErrNotExist.
func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("state %s: %w", filepath.Join(dir, recordFile), err)
	}
	return &r, nil
}

// pfExiting is PF_EXITING in a task's flags: do_exit has begun.
const pfExiting = 0x4

// procStart returns the start time of pid (field 22 of /proc/pid/stat) and
// its state letter: 'Z' for a zombie, 'X' for a process that has begun to
// exit.
func procStart(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	flags, ferr := strconv.ParseUint(f[6], 10, 64)
	if err != nil || ferr != nil || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	state = f[0][0]
	if flags&pfExiting != 0 && state != 'Z' {
		state = 'X'
	}
	return start, state, nil
}

// alive reports whether pid is still the process that started at start
// and has not exited.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s, state, err := procStart(pid)
	return err == nil && s == start && state != 'Z' && state != 'X'
}

// waitGone waits until pid, if it is still the process that started at
// start, is a zombie or gone, and reports whether it is.
func waitGone(pid int, start uint64, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		s, state, err := procStart(pid)
		if err != nil || s != start || state == 'Z' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
}

// procComm is the process's command name.
func procComm(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b)), err
}

// tail keeps the last max bytes written to it: bubblewrap's and the
// guest's output, for error messages. A sandbox cannot make it grow.
type tail struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int64
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.dropped += int64(over)
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped > 0 {
		return fmt.Sprintf("[%d bytes dropped]\n%s", t.dropped, t.buf)
	}
	return string(t.buf)
}

// lastLines returns up to n last lines of s, for error messages.
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// drain copies r into t until EOF and then closes done.
func drain(r io.ReadCloser, t *tail, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		t.Write(buf[:n])
		if err != nil {
			return
		}
	}
}

// idLocks serialises operations on one sandbox id.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	sync.Mutex
	refs int
}

func (l *idLocks) lock(id string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	k := l.locks[id]
	if k == nil {
		k = &idLock{}
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// isNotExist is errors.Is(err, fs.ErrNotExist).
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// killPid sends SIGKILL to pid if it is still the process that isOurs
// recognises. The check runs after a pidfd pins the process, so a pid
// reused between a listing and the kill is never hit.
func killPid(pid int, isOurs func() bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	if isOurs() {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}
