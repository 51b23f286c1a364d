package initd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/agentbox/agentbox/internal/guest"
)

const (
	// chunkSize is the most output one frame carries.
	chunkSize = 32 << 10
	// startTimeout bounds how long a reaper may take to start a command.
	startTimeout = 10 * time.Second
	// backstopDelay is how long a reaper has to carry out a kill before the
	// guest kills the reaper's tree itself (a process of the sandbox may
	// have stopped the reaper: it runs as the same user).
	backstopDelay = 2 * time.Second
	// drainIdle is how long output may stay silent once the command's tree
	// is dead before the guest stops reading it: only a process outside
	// the tree that was handed the pipe could still write.
	drainIdle = 2 * time.Second
)

// ctlCmd is a signal request from the daemon.
type ctlCmd struct {
	kind guest.FrameType // FrameSignal or FrameKill
	sig  int
}

// execStream runs one command for the daemon.
type execStream struct {
	s      *session
	id     uint32
	req    guest.ExecRequest
	stdin  *inQueue
	credit [2]*guest.Credit // stdout, stderr: what the daemon lets us send

	signals  chan ctlCmd  // FrameSignal requests; dropped when full
	killSig  atomic.Int32 // pending FrameKill signal (SIGKILL wins)
	kick     chan struct{}
	treeDead atomic.Bool // the reaper has exited: output can only drain

	// port, when not 0, makes the stream a relay of one connection to
	// this port on the sandbox's loopback instead of a command (port_linux.go).
	port uint16

	mu     sync.Mutex
	master *os.File // the terminal, for a TTY
}

func newExecStream(s *session, id uint32, req guest.ExecRequest) *execStream {
	st := &execStream{
		s:       s,
		id:      id,
		req:     req,
		stdin:   newInQueue(),
		signals: make(chan ctlCmd, 16),
		kick:    make(chan struct{}, 1),
	}
	st.credit[0] = guest.NewCredit(guest.InitialWindow)
	st.credit[1] = guest.NewCredit(guest.InitialWindow)
	return st
}

// request queues a signal or kill from the daemon without blocking the
// read loop.
func (st *execStream) request(c ctlCmd) {
	if c.kind == guest.FrameKill {
		if c.sig == int(syscall.SIGKILL) {
			st.killSig.Store(int32(c.sig))
		} else {
			st.killSig.CompareAndSwap(0, int32(c.sig))
		}
		select {
		case st.kick <- struct{}{}:
		default:
		}
		return
	}
	select {
	case st.signals <- c:
	default:
	}
}

// closeInput is called when the connection ends: the daemon will neither
// send input nor grant credit any more.
func (st *execStream) closeInput() {
	st.stdin.kill()
	st.credit[0].Close()
	st.credit[1].Close()
}

func (st *execStream) resize(rows, cols uint16) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.master != nil && rows > 0 && cols > 0 {
		pty.Setsize(st.master, &pty.Winsize{Rows: rows, Cols: cols})
	}
}

// run runs the command and reports how it ended.
func (st *execStream) run() {
	if st.port != 0 {
		st.relay()
		return
	}
	res, err := st.execute()
	if err != nil {
		var se *guest.StartError
		if !errors.As(err, &se) {
			se = &guest.StartError{Kind: guest.ErrKindInternal, Reason: err.Error()}
		}
		st.s.send(guest.FrameError, st.id, guest.EncodeError(se.Kind, se.Reason))
		return
	}
	st.s.send(guest.FrameExit, st.id, guest.EncodeExit(res))
}

type pumpResult struct {
	total     int64
	truncated bool
}

func (st *execStream) execute() (guest.ExecResult, error) {
	req := &st.req
	if reason := st.s.g.refuse; reason != "" {
		return guest.ExecResult{}, &guest.StartError{Argv0: req.Argv[0], Kind: guest.ErrKindStart, Reason: reason}
	}
	var child []*os.File
	var outs []outStream
	var in io.WriteCloser
	if req.TTY {
		master, slave, err := openPTY(st.s.g.commands)
		if err != nil {
			return guest.ExecResult{}, fmt.Errorf("opening a terminal: %w", err)
		}
		rows, cols := req.Rows, req.Cols
		if rows == 0 || cols == 0 {
			rows, cols = 24, 80
		}
		pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols})
		st.mu.Lock()
		st.master = master
		st.mu.Unlock()
		m := newPTYMaster(master)
		child, outs, in = []*os.File{slave, slave, slave}, []outStream{m}, m
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return guest.ExecResult{}, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return guest.ExecResult{}, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			return guest.ExecResult{}, err
		}
		child, outs, in = []*os.File{inR, outW, errW}, []outStream{outR, errR}, inW
	}
	closeOurs := func() {
		for _, f := range outs {
			f.Close()
		}
		in.Close()
	}

	g := st.s.g
	g.execMu.Lock()
	g.running++
	g.execMu.Unlock()
	defer g.execDone()
	r, err := g.takeReaper()
	if err == nil {
		if err = r.run(req, child); err != nil {
			// An idle reaper that died since; a fresh one will do.
			r.ctl.Close()
			if r, err = g.spawnReaper(); err == nil {
				err = r.run(req, child)
			}
		}
	}
	for _, f := range child {
		f.Close()
	}
	if err != nil {
		closeOurs()
		return guest.ExecResult{}, fmt.Errorf("handing the command to a reaper: %w", err)
	}
	// A reaper that was handed a terminal may hold it as its session's
	// (see startCommand): it serves no other command.
	reusable := false
	defer func() {
		if reusable {
			g.putReaper(r)
		} else {
			r.ctl.Close()
		}
	}()

	// The reaper answers FrameStarted or FrameError. The command runs
	// before the answer is written and may stop the reaper (same user):
	// keep waking it up.
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	wake := time.NewTicker(20 * time.Millisecond)
	defer wake.Stop()
	var pid uint32
	for waiting := true; waiting; {
		select {
		case f, ok := <-r.msgs:
			if ok && f.Stream != r.seq {
				continue // left over from an earlier command
			}
			waiting = false
			switch {
			case !ok:
				// Killed, maybe by the command before it could answer:
				// whether the command ran is unknown, and what it started
				// is the guest's to sweep (below).
			case f.Type == guest.FrameStarted:
				pid, err = guest.DecodeU32(f.Payload)
			case f.Type == guest.FrameError:
				kind, msg, derr := guest.DecodeError(f.Payload)
				if derr != nil {
					err = derr
				} else {
					err = &guest.StartError{Argv0: req.Argv[0], Kind: kind, Reason: msg}
				}
			default:
				err = fmt.Errorf("reaper answered %s", f.Type)
			}
		case <-wake.C:
			syscall.Kill(r.pid, syscall.SIGCONT)
		case <-timer.C:
			waiting = false
			err = fmt.Errorf("reaper did not start the command within %s", startTimeout)
		}
	}
	wake.Stop()
	go g.refill()
	if err != nil {
		var se *guest.StartError
		if errors.As(err, &se) {
			reusable = !req.TTY // it never started anything
		} else {
			g.killReaper(r)
		}
		closeOurs()
		return guest.ExecResult{}, err
	}
	start := time.Now()
	st.s.send(guest.FrameStarted, st.id, guest.EncodeU32(pid))

	var results [2]pumpResult
	var pumps sync.WaitGroup
	for i, f := range outs {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			results[i] = st.pump(i, f)
		}()
	}
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		st.writeStdin(in, req.TTY)
	}()

	var timeout, grace, backstop <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	kill := func(sig syscall.Signal) {
		r.w.WriteFrame(guest.FrameKill, r.seq, []byte{byte(sig)})
		syscall.Kill(r.pid, syscall.SIGCONT)
		if sig == syscall.SIGKILL && backstop == nil {
			backstop = time.After(backstopDelay)
		}
	}
	var status *guest.ExecResult
	var timedOut, canceled bool
	sessionDone := st.s.done
	msgs := r.msgs
	exited := false
	for !exited && status == nil {
		select {
		case <-timeout:
			timeout = nil
			timedOut = true
			if req.KillGrace > 0 {
				kill(syscall.SIGTERM)
				grace = time.After(req.KillGrace)
			} else {
				kill(syscall.SIGKILL)
			}
		case <-grace:
			grace = nil
			kill(syscall.SIGKILL)
		case <-st.kick:
			sig := syscall.Signal(st.killSig.Swap(0))
			if sig == syscall.SIGKILL {
				canceled = true
			}
			if sig != 0 {
				kill(sig)
			}
		case c := <-st.signals:
			r.w.WriteFrame(guest.FrameSignal, r.seq, []byte{byte(c.sig)})
		case <-sessionDone:
			sessionDone = nil
			kill(syscall.SIGKILL)
		case f, ok := <-msgs:
			if !ok {
				msgs = nil
			} else if f.Type == guest.FrameExit && f.Stream == r.seq {
				if res, err := guest.DecodeExit(f.Payload); err == nil {
					status = &res
				}
			}
		case <-r.exited:
			exited = true
		case <-backstop:
			backstop = nil
			g.log.Warn("reaper did not kill its command in time; killing its tree from the guest", "reaper_pid", r.pid)
			g.killReaper(r)
		}
	}
	if status == nil && msgs != nil {
		// The reaper died: its verdict, if it sent one, may still be on its
		// way. Its end of the socket is closed, so the reader reaches EOF.
		for f := range msgs {
			if f.Type == guest.FrameExit && f.Stream == r.seq {
				if res, err := guest.DecodeExit(f.Payload); err == nil {
					status = &res
				}
			}
		}
	}
	if status == nil {
		// Killed from inside: its orphans came to the guest.
		g.log.Warn("a reaper died without a verdict; sweeping its orphans", "reaper_pid", r.pid)
		g.sweepStrays()
	} else {
		reusable = !exited && !req.TTY
		g.sweepIfAlone()
	}

	st.treeDead.Store(true)
	for _, f := range outs {
		f.SetReadDeadline(time.Now().Add(drainIdle))
	}
	pumps.Wait()
	st.stdin.kill()
	if req.TTY {
		// The terminal's writer uses the raw descriptor: let it go before
		// the descriptor is closed and its number reused. (A pipe's
		// writer is woken by the close itself.)
		<-stdinDone
	}
	st.mu.Lock()
	st.master = nil
	st.mu.Unlock()
	closeOurs()

	res := guest.ExecResult{
		ExitCode:    -1,
		TimedOut:    timedOut,
		Canceled:    canceled && !timedOut,
		Duration:    time.Since(start),
		StdoutBytes: results[0].total,
	}
	res.StdoutTruncated = results[0].truncated
	if len(outs) > 1 {
		res.StderrBytes, res.StderrTruncated = results[1].total, results[1].truncated
	}
	if status != nil {
		res.ExitCode, res.Signal = status.ExitCode, status.Signal
		res.UserCPU, res.SysCPU, res.PeakMemBytes = status.UserCPU, status.SysCPU, status.PeakMemBytes
	}
	return res, nil
}

// outStream is a command's output: a pipe, or a terminal's master.
type outStream interface {
	io.ReadCloser
	SetReadDeadline(time.Time) error
}

// pump sends one output channel to the daemon within its credit, up to the
// cap; past the cap it appends the marker and keeps reading and dropping,
// so that the command never blocks on a full pipe because of the cap.
func (st *execStream) pump(i int, f outStream) pumpResult {
	credit := st.credit[i]
	ft := guest.FrameStdout + guest.FrameType(i)
	limit := st.req.OutputCap()
	buf := make([]byte, guest.HeaderSize+chunkSize)
	var res pumpResult
	var sent int64
	dropping := false // the daemon is gone
	for {
		if st.treeDead.Load() {
			f.SetReadDeadline(time.Now().Add(drainIdle))
		}
		var n int
		var err error
		if dropping || res.truncated {
			n, err = f.Read(buf[guest.HeaderSize:])
		} else {
			k, ok := credit.Take(chunkSize)
			if !ok {
				dropping = true
				continue
			}
			n, err = f.Read(buf[guest.HeaderSize : guest.HeaderSize+k])
			keep := int(min(int64(n), limit-sent))
			if k > keep {
				credit.Add(k - keep)
			}
			if keep > 0 {
				guest.PutHeader(buf, ft, st.id, keep)
				if st.s.w.WriteRaw(buf[:guest.HeaderSize+keep]) != nil {
					dropping = true
				}
				sent += int64(keep)
			}
			if n > keep {
				res.truncated = true
				st.sendMarker(credit, ft, limit)
			}
		}
		res.total += int64(n)
		if err != nil {
			return res // EOF, EIO from a hung-up terminal, or the drain deadline
		}
	}
}

func (st *execStream) sendMarker(credit *guest.Credit, ft guest.FrameType, limit int64) {
	m := []byte(guest.TruncationMarker(limit))
	for len(m) > 0 {
		k, ok := credit.Take(len(m))
		if !ok {
			return
		}
		if st.s.w.WriteFrame(ft, st.id, m[:k]) != nil {
			return
		}
		m = m[k:]
	}
}

// writeStdin copies the daemon's stdin frames to the command, granting
// credit back as each chunk is written (or dropped, once the command has
// stopped reading).
func (st *execStream) writeStdin(in io.WriteCloser, tty bool) {
	broken := false
	var last byte = '\n' // nothing typed yet: at the start of a line
	for {
		b, ok := st.stdin.next()
		if !ok {
			break
		}
		if !broken {
			if _, err := in.Write(b); err != nil {
				broken = true
			} else {
				last = b[len(b)-1]
			}
		}
		if st.stdin.release(len(b)) {
			st.s.send(guest.FrameWindow, st.id, guest.EncodeWindow(guest.ChanStdin, uint32(len(b))))
		}
	}
	if !st.stdin.eof() {
		return
	}
	if tty {
		// A terminal cannot be half-closed: its input ends the way a
		// person ends it (see guest.ExecRequest.TTY).
		if m, ok := in.(*ptyMaster); ok && !broken {
			m.Write(eofKeys(m.fd, last != '\n' && last != '\r'))
		}
		return
	}
	in.Close()
}

// inQueue holds stdin frames between the read loop and the command. The
// daemon may not send more than the window it was granted, so the queue is
// bounded by guest.InitialWindow.
type inQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	chunks [][]byte
	window int
	closed bool // FrameStdinClose arrived
	dead   bool // the command or the connection ended
}

func newInQueue() *inQueue {
	q := &inQueue{window: guest.InitialWindow}
	q.cond.L = &q.mu
	return q
}

func (q *inQueue) push(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("%w: stdin after stdin-close", guest.ErrProtocol)
	}
	if len(b) > q.window {
		return fmt.Errorf("%w: %d bytes of stdin with %d of window left", guest.ErrProtocol, len(b), q.window)
	}
	if q.dead {
		return nil
	}
	q.window -= len(b)
	q.chunks = append(q.chunks, b)
	q.cond.Signal()
	return nil
}

// next waits for the next chunk; false means there will be none.
func (q *inQueue) next() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) == 0 && !q.closed && !q.dead {
		q.cond.Wait()
	}
	if q.dead || len(q.chunks) == 0 {
		return nil, false
	}
	b := q.chunks[0]
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
	return b, true
}

// release returns n bytes of window; false when nobody needs to know.
func (q *inQueue) release(n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.window += n
	return !q.dead && !q.closed
}

func (q *inQueue) closeInput() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
}

func (q *inQueue) eof() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed && !q.dead
}

func (q *inQueue) kill() {
	q.mu.Lock()
	q.dead = true
	q.cond.Signal()
	q.mu.Unlock()
}

// execDone counts a command out.
func (g *Guest) execDone() {
	g.execMu.Lock()
	g.running--
	g.execMu.Unlock()
}

// sweepIfAlone is for a guest whose commands' orphans may come to itself
// (see Guest.sweepOrphans), where they cannot be told apart: the last
// command to end kills them all, before its own result goes out.
func (g *Guest) sweepIfAlone() {
	if !g.sweepOrphans {
		return
	}
	g.execMu.Lock()
	defer g.execMu.Unlock()
	if g.running == 1 {
		g.sweepStrays()
	}
}

// killReaper kills a reaper's whole tree and the reaper, for a reaper that
// does not do it itself.
func (g *Guest) killReaper(r *reaper) {
	g.mu.Lock()
	defer g.mu.Unlock()
	killTree(r.pid, nil)
	syscall.Kill(r.pid, syscall.SIGKILL)
}
