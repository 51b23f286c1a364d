package guest

import (
	"io"
	"sync"
	"time"
)

// Credit is the sending side of one channel's flow control: how many bytes
// the peer has agreed to receive. A sender Takes credit before it reads the
// data it will send, so it never holds more than it may send.
type Credit struct {
	mu     sync.Mutex
	cond   sync.Cond
	n      int
	closed bool
}

// NewCredit returns a Credit holding n bytes.
func NewCredit(n int) *Credit {
	c := &Credit{n: n}
	c.cond.L = &c.mu
	return c
}

// Take waits until some credit is available and takes up to max of it. It
// returns false once the Credit is closed.
func (c *Credit) Take(max int) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n == 0 && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, false
	}
	n := min(max, c.n)
	c.n -= n
	return n, true
}

// Add returns credit, from the peer's FrameWindow or unused from a Take. It
// reports false when the total would exceed what any peer may grant.
func (c *Credit) Add(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 0 || c.n+n > maxWindow {
		return false
	}
	c.n += n
	c.cond.Broadcast()
	return true
}

// Close wakes every Take for good.
func (c *Credit) Close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// FrameWriter writes whole frames to a connection, one at a time, each
// within a deadline so that a peer that stops reading cannot block its
// writers forever. The first error sticks and closes the connection.
type FrameWriter struct {
	mu      sync.Mutex
	c       FrameConn
	timeout time.Duration
	err     error
}

// FrameConn is what a FrameWriter writes to: a net.Conn or an *os.File.
type FrameConn interface {
	io.Writer
	SetWriteDeadline(time.Time) error
	Close() error
}

// NewFrameWriter returns a FrameWriter on c; timeout 0 means no deadline.
func NewFrameWriter(c FrameConn, timeout time.Duration) *FrameWriter {
	return &FrameWriter{c: c, timeout: timeout}
}

// WriteFrame writes one frame.
func (w *FrameWriter) WriteFrame(t FrameType, stream uint32, payload []byte) error {
	return w.WriteRaw(AppendFrame(make([]byte, 0, HeaderSize+len(payload)), t, stream, payload))
}

// WriteRaw writes b, which must be exactly one encoded frame (a header made
// by PutHeader followed by its payload).
func (w *FrameWriter) WriteRaw(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.timeout > 0 {
		w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	if _, err := w.c.Write(b); err != nil {
		w.err = err
		w.c.Close()
		return err
	}
	return nil
}
