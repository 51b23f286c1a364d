package initd

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
)

// portDialTimeout bounds the guest's connect to a port of the sandbox's
// loopback: a listener that does not accept in time is as good as none.
const portDialTimeout = 5 * time.Second

// relay serves a FrameDial stream: it connects to st.port on the
// sandbox's loopback, as the guest's user and outside the commands'
// Landlock ruleset and seccomp filter, and carries that connection for
// the daemon (guest.Conn.OpenPort). The daemon's stdin frames go to the
// server and its stdin-close half-closes the connection; the server's
// bytes go back as stdout frames within the daemon's credit, so a client
// that stops reading stops the guest reading the server, and nobody
// buffers. The stream ends with FrameExit once the server's side ends,
// or when the daemon kills the stream or goes away.
//
// Only 127.0.0.1 is ever dialled: the daemon names a port, never an
// address, so a published port cannot reach past the sandbox's loopback.
func (st *execStream) relay() {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(st.port)))
	d := net.Dialer{Timeout: portDialTimeout}
	nc, err := d.Dial("tcp4", addr)
	if err != nil {
		st.s.send(guest.FrameError, st.id, guest.EncodeError(guest.ErrKindStart, fmt.Sprintf("connecting to %s in the sandbox: %v", addr, err)))
		return
	}
	c := nc.(*net.TCPConn)
	start := time.Now()
	st.s.send(guest.FrameStarted, st.id, guest.EncodeU32(0))

	ended := make(chan struct{})
	go func() {
		select {
		case <-st.kick:
		case <-st.s.done:
		case <-ended:
		}
		c.Close()
	}()
	var in int64
	inDone := make(chan struct{})
	go func() {
		defer close(inDone)
		in = st.relayInput(c)
	}()
	// The relay has no output cap: the client reads what the server sends.
	st.req.MaxOutputBytes = math.MaxInt64
	out := st.pump(0, c)
	close(ended)
	c.Close()
	st.stdin.kill()
	<-inDone
	st.s.send(guest.FrameExit, st.id, guest.EncodeExit(guest.ExecResult{
		Duration:    time.Since(start),
		StdoutBytes: out.total,
		StderrBytes: in, // what the client sent, for the daemon's accounting
	}))
}

// relayInput copies the daemon's stdin frames to the server, granting
// credit back as each chunk is written (or dropped, once the connection
// broke), and half-closes the connection at the daemon's end of input.
// It returns the bytes written.
func (st *execStream) relayInput(c *net.TCPConn) int64 {
	var n int64
	broken := false
	for {
		b, ok := st.stdin.next()
		if !ok {
			break
		}
		if !broken {
			if _, err := c.Write(b); err != nil {
				broken = true
			} else {
				n += int64(len(b))
			}
		}
		if st.stdin.release(len(b)) {
			st.s.send(guest.FrameWindow, st.id, guest.EncodeWindow(guest.ChanStdin, uint32(len(b))))
		}
	}
	if !broken && st.stdin.eof() {
		c.CloseWrite()
	}
	return n
}
