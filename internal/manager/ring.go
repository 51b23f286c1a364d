package manager

import (
	"context"
	"io"
	"sync"
)

// ring keeps the last size bytes written to one output stream of a
// background process, numbered from the stream's first byte. Writes never
// block and never fail: the guest's flow control must not let a ring that
// nobody reads stop the command, so the daemon drains every stream into
// its ring at once and the oldest bytes fall out. Memory grows with what
// was written, up to size.
type ring struct {
	mu     sync.Mutex
	buf    []byte // grows to size, then wraps: byte at offset o is buf[o%size]
	size   int
	total  int64 // bytes written so far: the offset of the next one
	closed bool
	// wake, made by the first follower that waits, is closed (and
	// dropped) at the next write and at close, waking followers. A ring
	// nobody waits on makes no channel per write: the rings of ordinary
	// execs sit on the exec's hot path.
	wake chan struct{}
}

func newRing(size int) *ring {
	return &ring{size: size}
}

func (r *ring) Write(p []byte) (int, error) {
	n := len(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || n == 0 {
		return n, nil
	}
	if len(p) > r.size {
		// Only the last size bytes can be kept.
		r.total += int64(len(p) - r.size)
		p = p[len(p)-r.size:]
	}
	for len(p) > 0 {
		if len(r.buf) < r.size && int64(len(r.buf)) == r.total {
			k := min(len(p), r.size-len(r.buf))
			r.grow(len(r.buf) + k)
			r.buf = append(r.buf, p[:k]...)
			r.total += int64(k)
			p = p[k:]
			continue
		}
		if len(r.buf) < r.size {
			// Skipped ahead above before the buffer was full: make it
			// full size, so that offsets wrap from here on.
			r.grow(r.size)
			r.buf = r.buf[:r.size]
		}
		i := int(r.total % int64(r.size))
		k := copy(r.buf[i:], p)
		r.total += int64(k)
		p = p[k:]
	}
	r.wakeFollowers()
	return n, nil
}

// grow makes room for n bytes in buf, doubling its capacity but never
// past size, so that a ring never holds more than size bytes of memory.
func (r *ring) grow(n int) {
	if n <= cap(r.buf) {
		return
	}
	c := min(max(2*cap(r.buf), n, 4096), r.size)
	b := make([]byte, len(r.buf), c)
	copy(b, r.buf)
	r.buf = b
}

// close marks the end of the stream: followers return once they have
// read everything.
func (r *ring) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.wakeFollowers()
	}
}

// wakeFollowers wakes the followers waiting; r.mu must be held.
func (r *ring) wakeFollowers() {
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
}

// written is the number of bytes written so far.
func (r *ring) written() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// read returns up to max bytes from offset off (negative: that many
// bytes before the end), where the data starts (later than off when the
// bytes from off fell out of the ring, or the end when off is past it),
// and whether the stream has ended with nothing after the data.
func (r *ring) read(off int64, max int) (data []byte, start int64, eof bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off < 0 {
		off = r.total + off
	}
	first := r.oldest()
	off = min(max64(off, first), r.total)
	n := int(min(r.total-off, int64(max)))
	data = make([]byte, n)
	for k := 0; k < n; {
		i := int((off + int64(k)) % int64(r.size))
		k += copy(data[k:], r.buf[i:min(len(r.buf), i+n-k)])
	}
	return data, off, r.closed && off+int64(n) == r.total
}

// oldest is the offset of the oldest byte kept; r.mu must be held.
func (r *ring) oldest() int64 {
	return max64(r.total-int64(min(len(r.buf), r.size)), 0)
}

// wait blocks until there are bytes past off, the stream ends, or ctx
// ends.
func (r *ring) wait(ctx context.Context, off int64) error {
	for {
		r.mu.Lock()
		if r.total > off || r.closed {
			r.mu.Unlock()
			return nil
		}
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// stdinQueue holds the input written to a background process through the
// API until the guest takes it (within the stream's window). It is
// bounded: a write waits for room, within its context, and a command that
// does not read its input makes writes stall there, never the daemon's
// memory grow.
type stdinQueue struct {
	mu     sync.Mutex
	buf    []byte
	max    int
	closed bool // end of input asked for: Read returns io.EOF once empty
	dead   bool // the process ended: writes fail, Read returns io.EOF
	change chan struct{}
}

func newStdinQueue(max int, initial []byte) *stdinQueue {
	return &stdinQueue{max: max, buf: initial, change: make(chan struct{})}
}

func (q *stdinQueue) changed() {
	close(q.change)
	q.change = make(chan struct{})
}

// Read is the guest stream's side: it waits for input.
func (q *stdinQueue) Read(p []byte) (int, error) {
	for {
		q.mu.Lock()
		switch {
		case q.dead:
			q.mu.Unlock()
			return 0, io.EOF
		case len(q.buf) > 0:
			n := copy(p, q.buf)
			q.buf = q.buf[n:]
			if len(q.buf) == 0 {
				q.buf = nil
			}
			q.changed()
			q.mu.Unlock()
			return n, nil
		case q.closed:
			q.mu.Unlock()
			return 0, io.EOF
		}
		ch := q.change
		q.mu.Unlock()
		<-ch
	}
}

// errStdinClosed and errProcessEnded say why a write took nothing.
type stdinError string

func (e stdinError) Error() string { return string(e) }

const (
	errStdinClosed  stdinError = "its input is closed"
	errProcessEnded stdinError = "it has ended"
)

// write queues p, waiting for room while ctx lasts, and returns how much
// it queued: less than len(p) only with an error (ctx's, or one of the
// stdinErrors).
func (q *stdinQueue) write(ctx context.Context, p []byte) (int, error) {
	n := 0
	for {
		q.mu.Lock()
		switch {
		case q.dead:
			q.mu.Unlock()
			return n, errProcessEnded
		case q.closed:
			q.mu.Unlock()
			return n, errStdinClosed
		}
		if room := q.max - len(q.buf); room > 0 && len(p) > 0 {
			k := min(room, len(p))
			q.buf = append(q.buf, p[:k]...)
			p = p[k:]
			n += k
			q.changed()
		}
		if len(p) == 0 {
			q.mu.Unlock()
			return n, nil
		}
		ch := q.change
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
}

// closeInput ends the input once what is queued has been read.
func (q *stdinQueue) closeInput() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.changed()
	}
}

func (q *stdinQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// kill drops what is queued: the process ended.
func (q *stdinQueue) kill() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.dead {
		q.dead = true
		q.buf = nil
		q.changed()
	}
}
