package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"syscall"
	"time"
)

const (
	// chunkSize is the most data one stdin, stdout or stderr frame carries.
	chunkSize = 32 << 10
	// killWait is how long Wait waits for a result after asking the guest
	// to kill a command before it gives the command up as Lost. The guest's
	// own backstop acts well within it.
	killWait = 5 * time.Second
	// backstopSlack is how long past a command's Timeout (and KillGrace) the
	// daemon waits for the guest's verdict before killing it itself.
	backstopSlack = 10 * time.Second
)

// Exec runs one command in the guest and waits for it: stdout and stderr
// are streamed to the writers as the command writes them (a nil writer
// drops its stream), stdin (nil for none) is copied to the command. When
// ctx ends, the command's whole tree is killed. Exec returns promptly with
// Lost set when the connection dies: it never hangs on a dead guest.
//
// The result is meaningful even when err is non-nil: err reports a
// command that could not start (*StartError), a context that ended the
// wait, or a writer that failed (output is then dropped, not the command).
// Exec does not wait for a stdin Read that is still blocked when the
// command ends.
func (c *Conn) Exec(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	p, err := c.Start(ctx, req, stdin, stdout, stderr)
	if err != nil {
		var se *StartError
		if errors.As(err, &se) {
			return ExecResult{ExitCode: se.ExitCode()}, err
		}
		return ExecResult{ExitCode: -1, Lost: errors.Is(err, ErrClosed)}, err
	}
	return p.Wait(ctx)
}

// Process is a command running in the guest.
type Process struct {
	c     *Conn
	id    uint32
	argv0 string
	req   ExecRequest
	start time.Time
	out   [2]*outQueue // stdout, stderr
	stdin *Credit

	started chan struct{}
	done    chan struct{}

	mu       sync.Mutex
	pid      int
	state    finishState
	res      ExecResult
	startErr error
}

type finishState int

const (
	running finishState = iota
	finishExit
	finishStartError
	finishLost
)

// Start starts one command and returns once the guest says it runs (or
// could not start it, with a *StartError). See Exec.
func (c *Conn) Start(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("exec %q: %w", firstArg(req.Argv), err)
	}
	return c.start(ctx, FrameOpen, EncodeExecRequest(&req), req.Argv[0], req, stdin, stdout, stderr)
}

// OpenPort connects, through the guest, to TCP port on the sandbox's own
// loopback (127.0.0.1) and relays rw over that connection: what is read
// from rw goes to the sandbox's server, what the server sends is written
// to rw. It returns once the guest has connected (or could not, with a
// *StartError); Wait then waits for the relay to end.
//
// The stream is an exec stream with FrameDial instead of FrameOpen: the
// guest answers FrameStarted (pid 0) or FrameError; the client's bytes go
// as stdin (its end of input, FrameStdinClose, half-closes the
// connection), the server's as stdout, both under the same flow control
// as a command's; FrameKill closes the connection, and FrameExit (exit 0)
// says the server's side ended, which ends the relay. The caller closes
// rw once Wait returns, which ends a Read of rw still under way.
func (c *Conn) OpenPort(ctx context.Context, port uint16, rw io.ReadWriter) (*Process, error) {
	if port == 0 {
		return nil, fmt.Errorf("%w: port 0", ErrInvalid)
	}
	name := fmt.Sprintf("port %d", port)
	return c.start(ctx, FrameDial, EncodePort(port), name, ExecRequest{Argv: []string{name}}, rw, rw, nil)
}

// start opens a stream with frame open (FrameOpen or FrameDial) carrying
// payload, and waits for the guest's answer.
func (c *Conn) start(ctx context.Context, open FrameType, payload []byte, argv0 string, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	p := &Process{
		c:       c,
		argv0:   argv0,
		req:     req,
		start:   time.Now(),
		stdin:   NewCredit(InitialWindow),
		started: make(chan struct{}),
		done:    make(chan struct{}),
	}
	for i, w := range []io.Writer{stdout, stderr} {
		p.out[i] = newOutQueue(w)
	}
	c.openMu.Lock()
	if err := c.register(p); err != nil {
		c.openMu.Unlock()
		return nil, fmt.Errorf("exec %q: %w: %w", p.argv0, err, ErrNotSent)
	}
	err := c.w.WriteFrame(open, p.id, payload)
	c.openMu.Unlock()
	for i, q := range p.out {
		ch := Channel(i + 1)
		go q.run(func(n int) { p.grant(ch, n) })
	}
	if err != nil {
		c.fail(err)
		p.abandonOutput()
		return nil, fmt.Errorf("exec %q: %w: %w", p.argv0, ErrClosed, ErrNotSent)
	}
	// The command's input is read only once the guest has confirmed the
	// start: a command lost before that read none of it (ErrNotSent).
	select {
	case <-p.started:
		go p.pumpStdin(stdin)
		return p, nil
	case <-p.done:
		if p.isStarted() {
			go p.pumpStdin(stdin)
			return p, nil // a quick command: started and done at once
		}
		p.abandonOutput()
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.startErr != nil {
			return nil, p.startErr
		}
		return nil, fmt.Errorf("exec %q: %w: %w", p.argv0, ErrClosed, ErrNotSent)
	case <-ctx.Done():
		p.Kill()
		p.abandonOutput()
		return nil, ctx.Err()
	}
}

// abandonOutput, for a Process that Start does not return, stops its
// output queues from writing to stdout and stderr and waits until they no
// longer can: the caller may reuse or finish those writers (an HTTP
// response) as soon as Start returns.
func (p *Process) abandonOutput() {
	for _, q := range p.out {
		q.detach()
	}
}

func firstArg(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

// Pid is the command's process id inside the sandbox.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Signal sends sig to the command's process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("%w: signal %d", ErrInvalid, sig)
	}
	return p.send(FrameSignal, []byte{byte(sig)})
}

// Kill kills the command's whole process tree.
func (p *Process) Kill() error {
	return p.send(FrameKill, []byte{byte(syscall.SIGKILL)})
}

// SignalTree sends sig to every process of the command's tree; SIGKILL
// ends the command, as Kill does.
func (p *Process) SignalTree(sig syscall.Signal) error {
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("%w: signal %d", ErrInvalid, sig)
	}
	return p.send(FrameKill, []byte{byte(sig)})
}

// Done is closed once the command has ended (or was lost).
func (p *Process) Done() <-chan struct{} { return p.done }

func (p *Process) send(t FrameType, payload []byte) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.c.w.WriteFrame(t, p.id, payload); err != nil {
		p.c.fail(err)
		return fmt.Errorf("exec %q: %w", p.argv0, ErrClosed)
	}
	return nil
}

// Wait waits for the command to end and its output to reach the writers.
// When ctx ends first, the command's tree is killed and Wait returns the
// result (Canceled) with ctx's error.
func (p *Process) Wait(ctx context.Context) (ExecResult, error) {
	return p.wait(ctx, true)
}

func (p *Process) wait(ctx context.Context, drain bool) (ExecResult, error) {
	var backstop <-chan time.Time
	if p.req.Timeout > 0 {
		t := time.NewTimer(time.Until(p.start.Add(p.req.Timeout + p.req.KillGrace + backstopSlack)))
		defer t.Stop()
		backstop = t.C
	}
	var ctxErr error
	select {
	case <-p.done:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		p.killAndWait()
	case <-backstop:
		// The guest should have enforced the timeout long ago.
		p.killAndWait()
	}
	var werr error
	if drain {
		for i, q := range p.out {
			<-q.finished
			if q.err != nil && werr == nil {
				werr = fmt.Errorf("exec %q: writing %s: %w", p.argv0, Channel(i+1), q.err)
			}
		}
	}
	p.mu.Lock()
	res := p.res
	p.mu.Unlock()
	if ctxErr != nil {
		return res, ctxErr
	}
	return res, werr
}

// killAndWait kills the command and waits a bounded time for its result;
// a guest that does not answer loses the command.
func (p *Process) killAndWait() {
	p.Kill()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.c.log.Warn("guest did not report a killed command; giving it up", "guest_pid", p.c.info.Pid, "exec", p.argv0)
		p.finish(finishLost, ExecResult{}, nil)
	}
}

// handle takes one frame of this stream from the read loop.
func (p *Process) handle(f Frame) error {
	switch f.Type {
	case FrameStdout, FrameStderr:
		if !p.isStarted() {
			return fmt.Errorf("%w: output before start on stream %d", ErrProtocol, p.id)
		}
		return p.out[f.Type-FrameStdout].push(f.Payload)
	case FrameStarted:
		pid, err := DecodeU32(f.Payload)
		if err != nil {
			return err
		}
		p.mu.Lock()
		if p.pid != 0 {
			p.mu.Unlock()
			return fmt.Errorf("%w: stream %d started twice", ErrProtocol, p.id)
		}
		p.pid = int(pid)
		p.mu.Unlock()
		close(p.started)
	case FrameExit:
		if !p.isStarted() {
			return fmt.Errorf("%w: exit before start on stream %d", ErrProtocol, p.id)
		}
		res, err := DecodeExit(f.Payload)
		if err != nil {
			return err
		}
		p.finish(finishExit, res, nil)
	case FrameError:
		kind, msg, err := DecodeError(f.Payload)
		if err != nil {
			return err
		}
		if p.isStarted() {
			// The guest lost track of a running command.
			p.c.log.Warn("guest failed a running command", "guest_pid", p.c.info.Pid, "exec", p.argv0, "error", msg)
			p.finish(finishLost, ExecResult{}, nil)
			return nil
		}
		p.finish(finishStartError, ExecResult{}, &StartError{Argv0: p.argv0, Kind: kind, Reason: msg})
	case FrameWindow:
		ch, n, err := DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		if ch != ChanStdin || !p.stdin.Add(int(n)) {
			return fmt.Errorf("%w: bad stdin window on stream %d", ErrProtocol, p.id)
		}
	}
	return nil
}

func (p *Process) isStarted() bool {
	select {
	case <-p.started:
		return true
	default:
		return false
	}
}

// finish records how the stream ended, once, and releases everything that
// waits on it.
func (p *Process) finish(state finishState, res ExecResult, startErr error) {
	p.mu.Lock()
	if p.state != running {
		p.mu.Unlock()
		return
	}
	p.state = state
	switch state {
	case finishExit:
		p.res = res
	case finishStartError:
		p.startErr = startErr
	case finishLost:
		p.res = ExecResult{ExitCode: -1, Lost: true, Duration: time.Since(p.start)}
		p.res.StdoutBytes = p.out[0].receivedBytes()
		p.res.StderrBytes = p.out[1].receivedBytes()
	}
	p.mu.Unlock()
	close(p.done)
	p.c.unregister(p.id)
	p.stdin.Close()
	for _, q := range p.out {
		q.close()
	}
}

// grant gives the guest back credit for n bytes of channel ch that reached
// their writer.
func (p *Process) grant(ch Channel, n int) {
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.c.w.WriteFrame(FrameWindow, p.id, EncodeWindow(ch, uint32(n))); err != nil {
		p.c.fail(err)
	}
}

// pumpStdin copies r to the command within the stdin window.
func (p *Process) pumpStdin(r io.Reader) {
	if r == nil {
		p.send(FrameStdinClose, nil)
		return
	}
	buf := make([]byte, HeaderSize+chunkSize)
	for {
		n, ok := p.stdin.Take(chunkSize)
		if !ok {
			return
		}
		m, err := r.Read(buf[HeaderSize : HeaderSize+n])
		if m < n {
			p.stdin.Add(n - m)
		}
		if m > 0 {
			select {
			case <-p.done:
				return
			default:
			}
			PutHeader(buf, FrameStdin, p.id, m)
			if werr := p.c.w.WriteRaw(buf[:HeaderSize+m]); werr != nil {
				p.c.fail(werr)
				return
			}
		}
		if err != nil {
			p.send(FrameStdinClose, nil)
			return
		}
	}
}

// outQueue holds one output channel's data between the read loop and the
// caller's writer. The guest cannot send more than the window it was
// granted, so the queue never holds more than InitialWindow bytes; a guest
// that tries is cut off.
type outQueue struct {
	mu        sync.Mutex
	cond      sync.Cond
	dst       io.Writer
	chunks    [][]byte
	buffered  int // received, not yet written
	window    int // what the guest may still send
	received  int64
	maxBuffer int // high-water mark of buffered, for tests
	closed    bool
	err       error // the writer's first error; later output is dropped
	finished  chan struct{}
}

// outPayloads holds buffers for the payloads of output frames:
// outPayloads[i] those of minPooled<<i bytes, up to chunkSize. A command
// that floods its output sends a frame per read of its pipe, hundreds of
// MB/s; with a fresh buffer each, the daemon's heap grows with that
// garbage and with how far the collector lags behind it, not with what it
// holds (at most the window per channel). A payload takes the smallest
// buffer it fits, so a queue of payloads holds at most twice their bytes,
// however a hostile guest sizes its frames; one of under minPooled bytes
// gets a buffer of its own.
var outPayloads [7]sync.Pool // 512 B, 1 KiB, … 32 KiB

const minPooled = 512

// outputPayload returns a buffer of n bytes for an output frame's payload.
func outputPayload(n int) []byte {
	if n < minPooled || n > chunkSize {
		return make([]byte, n)
	}
	i := bits.Len(uint(n-1)) - bits.Len(minPooled-1) // the smallest class that holds n
	if b, ok := outPayloads[i].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, minPooled<<i)
}

// recycleOutput hands an output frame's payload back to outPayloads once
// nothing refers to it any more: the writer it went to has returned, and
// io.Writer forbids a writer to keep what it was given.
func recycleOutput(b []byte) {
	c := cap(b)
	if c < minPooled || c > chunkSize || c&(c-1) != 0 {
		return // not from outPayloads
	}
	b = b[:c]
	outPayloads[bits.Len(uint(c))-bits.Len(minPooled)].Put(&b)
}

func newOutQueue(dst io.Writer) *outQueue {
	q := &outQueue{dst: dst, window: InitialWindow, finished: make(chan struct{})}
	q.cond.L = &q.mu
	return q
}

func (q *outQueue) push(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(b) > q.window {
		return fmt.Errorf("%w: guest sent %d bytes with %d of window left", ErrProtocol, len(b), q.window)
	}
	if q.closed {
		recycleOutput(b)
		return nil
	}
	q.window -= len(b)
	q.buffered += len(b)
	q.received += int64(len(b))
	q.maxBuffer = max(q.maxBuffer, q.buffered)
	q.chunks = append(q.chunks, b)
	q.cond.Signal()
	return nil
}

// receivedBytes is what arrived so far, for a command that was lost.
func (q *outQueue) receivedBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.received
}

// detach drops what is queued, makes run write nothing more, and waits
// for run to end, including a Write it had under way.
func (q *outQueue) detach() {
	q.mu.Lock()
	q.dst = nil
	for _, b := range q.chunks {
		recycleOutput(b)
	}
	q.chunks = nil
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
	<-q.finished
}

// close lets run finish once the queue is empty.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Signal()
	q.mu.Unlock()
}

// run writes queued data to dst and grants the guest credit for it.
func (q *outQueue) run(grant func(int)) {
	defer close(q.finished)
	for {
		q.mu.Lock()
		for len(q.chunks) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.chunks) == 0 {
			q.mu.Unlock()
			return
		}
		b := q.chunks[0]
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		dst := q.dst // read under the lock: detach clears it
		q.mu.Unlock()
		if q.err == nil && dst != nil {
			if _, err := dst.Write(b); err != nil {
				q.err = err
			}
		}
		n := len(b)
		recycleOutput(b)
		q.mu.Lock()
		q.buffered -= n
		q.window += n
		closed := q.closed
		q.mu.Unlock()
		if !closed {
			grant(n)
		}
	}
}
