package initd

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pollInterval is how often a terminal read or write that is waiting looks
// whether the command's tree is gone.
const pollInterval = 50 * time.Millisecond

// ptyMaster reads and writes a terminal's master side with poll(2) rather
// than Go's poller: gVisor neither reports EIO on the master when the last
// slave closes nor wakes Go's poller, so a plain read would wait forever.
// Once the command's tree is gone (SetReadDeadline), reads end as soon as
// the terminal holds no more output, and writes fail.
type ptyMaster struct {
	f    *os.File
	fd   int
	dead atomic.Bool
}

func newPTYMaster(f *os.File) *ptyMaster {
	return &ptyMaster{f: f, fd: int(f.Fd())}
}

var errTreeGone = errors.New("the command's processes are gone")

// wait polls for events until one arrives or the tree is gone.
func (m *ptyMaster) wait(events int16) (int16, error) {
	for {
		fds := []unix.PollFd{{Fd: int32(m.fd), Events: events}}
		n, err := unix.Poll(fds, int(pollInterval/time.Millisecond))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n > 0 {
			return fds[0].Revents, nil
		}
		if m.dead.Load() {
			return 0, errTreeGone
		}
	}
}

func (m *ptyMaster) Read(p []byte) (int, error) {
	for {
		rev, err := m.wait(unix.POLLIN)
		if err != nil {
			return 0, io.EOF
		}
		if rev&unix.POLLIN == 0 {
			return 0, io.EOF // hung up, nothing left
		}
		n, err := syscall.Read(m.fd, p)
		switch {
		case err == syscall.EINTR || err == syscall.EAGAIN:
			continue
		case err != nil || n == 0:
			return 0, io.EOF // EIO: every slave is closed
		}
		return n, nil
	}
}

func (m *ptyMaster) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		if _, err := m.wait(unix.POLLOUT); err != nil {
			return done, err
		}
		n, err := syscall.Write(m.fd, p[done:])
		if err == syscall.EINTR || err == syscall.EAGAIN {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// SetReadDeadline marks the command's tree as gone; the time is ignored.
func (m *ptyMaster) SetReadDeadline(time.Time) error {
	m.dead.Store(true)
	return nil
}

func (m *ptyMaster) Close() error {
	m.dead.Store(true)
	return m.f.Close()
}

// eofKeys is what ends the input of the terminal whose master is fd: its
// EOF character (VEOF, ^D by default), twice when a line without its
// newline may wait in the line discipline's buffer (the first ^D delivers
// the line, the second reads as end of file), once in raw mode, where the
// program decides what it means. A terminal whose EOF character is
// disabled gets nothing. On Linux and gVisor the master's TCGETS reports
// the slave's settings (the line discipline is shared).
func eofKeys(fd int, partialLine bool) []byte {
	eof, canonical := byte(4), true
	if t, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		eof, canonical = t.Cc[unix.VEOF], t.Lflag&unix.ICANON != 0
	}
	switch {
	case eof == 0: // _POSIX_VDISABLE
		return nil
	case canonical && partialLine:
		return []byte{eof, eof}
	}
	return []byte{eof}
}
