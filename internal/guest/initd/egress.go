package initd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
)

// Egress relays the sandbox's proxy traffic: it listens on a loopback TCP
// address inside the sandbox (where HTTP_PROXY points) and carries each
// accepted connection, byte for byte, over a new connection to the
// daemon's per-sandbox egress socket. The daemon's egress proxy does every
// check; the relay only moves bytes, so a process that dials the egress
// socket itself gains nothing over one that uses the proxy address.
type Egress struct {
	// Listen is the loopback address to serve, e.g. "127.0.0.1:3128".
	Listen string
	// Socket is the daemon's egress socket inside the sandbox.
	Socket string
	// Logger receives a line per failed relay.
	Logger *slog.Logger

	// noHandoff is set once the daemon did not take a handed-over socket:
	// this runtime cannot pass one (gVisor), and the relay carries bytes.
	noHandoff atomic.Bool
}

// egressDialTimeout bounds the connection to the daemon's egress socket.
const egressDialTimeout = 5 * time.Second

// Listener opens the loopback listener. Only a loopback address is served:
// the relay must never be reachable from anywhere but the sandbox itself.
func (e *Egress) Listener() (net.Listener, error) {
	ap, err := netip.ParseAddrPort(e.Listen)
	if err != nil {
		return nil, fmt.Errorf("egress proxy address %q: %w", e.Listen, err)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("egress proxy address %q is not a loopback address", e.Listen)
	}
	if e.Socket == "" {
		return nil, errors.New("egress proxy: no egress socket")
	}
	return net.Listen("tcp", ap.String())
}

// Serve relays every connection ln accepts until ctx ends or ln fails.
func (e *Egress) Serve(ctx context.Context, ln net.Listener) error {
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// A connection to the egress socket is made ahead of each client: on
	// gVisor, connecting to a host socket is a round trip to the gofer.
	fillCtx, stopFill := context.WithCancel(ctx)
	defer stopFill()
	spares := make(chan spareConn)
	wg.Go(func() { e.fill(fillCtx, spares) })
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress proxy: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.relay(ctx, c, spares); err != nil {
				log.Warn("egress relay", "error", err)
			}
		}()
	}
}

// relay carries one connection to the egress socket and back. It first
// offers the daemon the client's socket itself (guest.EgressHandoff):
// then no byte passes through the relay, which the sandbox's CPU would
// pay for. When the daemon did not get it, the relay carries the bytes,
// and stops offering for the connections after. Each direction's end of
// data is passed on as a half-close, so a client that shuts down its
// writing side still reads the whole answer.
func (e *Egress) relay(ctx context.Context, c net.Conn, spares <-chan spareConn) error {
	defer c.Close()
	up, err := e.dial(ctx, spares)
	if err != nil {
		return err
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	// mark: up must first say that it relays.
	mark := e.noHandoff.Load()
	if !mark {
		handed, err := e.handoff(c, up)
		switch {
		case handed:
			return nil
		case errors.Is(err, errNoHandoff):
			// Whether the marker went out is unknown: start over.
			up.Close()
			if up, err = e.dial(ctx, spares); err != nil {
				return err
			}
			defer up.Close()
			mark = true
		case err != nil:
			return err
		}
		// Otherwise the daemon answered that it got no socket: up relays.
	}
	if mark {
		if _, err := up.Write([]byte{guest.EgressRelay}); err != nil {
			return fmt.Errorf("egress socket %s: %w", e.Socket, err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relayCopy(up, c)
		closeWrite(up)
	}()
	relayCopy(c, up)
	closeWrite(c)
	<-done
	return nil
}

// relayBuf is the relay's read size. It relays only where the socket
// cannot be handed over, that is under gVisor, where every system call
// costs tens of microseconds: io.Copy's 32 KiB (or a splice the runtime
// emulates) would make the system calls, not the bytes, the limit.
const relayBuf = 1 << 20

// relayBufs holds the relay's buffers between connections. A fresh 1 MiB
// buffer per direction per connection cost gVisor a page fault per 4 KiB
// it zeroed (each one a trip to the Sentry) and the Go runtime a garbage
// collection every few connections: most of what a new connection added.
var relayBufs = sync.Pool{New: func() any { return new([relayBuf]byte) }}

// relayCopy copies src to dst through one large buffer: the anonymous
// structs hide ReadFrom and WriteTo, which io.CopyBuffer would otherwise
// use with their own small buffers.
func relayCopy(dst io.Writer, src io.Reader) {
	buf := relayBufs.Get().(*[relayBuf]byte)
	defer relayBufs.Put(buf)
	io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf[:])
}

// spareMaxAge bounds how long a connection made ahead waits for its
// client, well within the daemon's idle timeout for a connection that has
// said nothing.
const spareMaxAge = 20 * time.Second

// spareConn is a connection to the egress socket made ahead of its client.
type spareConn struct {
	c  net.Conn
	at time.Time
}

// fill keeps a connection to the egress socket ready on spares until ctx
// ends.
func (e *Egress) fill(ctx context.Context, spares chan<- spareConn) {
	d := net.Dialer{Timeout: egressDialTimeout}
	for {
		c, err := d.DialContext(ctx, "unix", e.Socket)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		select {
		case spares <- spareConn{c: c, at: time.Now()}:
		case <-ctx.Done():
			c.Close()
			return
		}
	}
}

// dial returns a connection to the egress socket: the one made ahead when
// it is fresh, else a new one.
func (e *Egress) dial(ctx context.Context, spares <-chan spareConn) (net.Conn, error) {
	select {
	case s := <-spares:
		if time.Since(s.at) < spareMaxAge {
			return s.c, nil
		}
		s.c.Close()
	default:
	}
	d := net.Dialer{Timeout: egressDialTimeout}
	up, err := d.DialContext(ctx, "unix", e.Socket)
	if err != nil {
		return nil, fmt.Errorf("dialing the egress socket %s: %w", e.Socket, err)
	}
	return up, nil
}

// errNoHandoff is handoff's: the socket could not be handed over, and up
// is unusable.
var errNoHandoff = errors.New("no handoff")

// handoff offers c's socket to the daemon over up and reports whether the
// daemon took it. When it did not, up goes on as a relay connection.
func (e *Egress) handoff(c, up net.Conn) (bool, error) {
	tc, ok1 := c.(*net.TCPConn)
	uc, ok2 := up.(*net.UnixConn)
	if !ok1 || !ok2 {
		e.noHandoff.Store(true)
		return false, errNoHandoff
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false, err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix([]byte{guest.EgressHandoff}, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return false, err
	}
	if werr != nil {
		// This runtime cannot pass the socket.
		e.noHandoff.Store(true)
		return false, errNoHandoff
	}
	// The daemon closes up once it holds the socket, or answers that it
	// got none. Meanwhile it may already serve the client.
	_ = up.SetReadDeadline(time.Now().Add(egressDialTimeout))
	var b [1]byte
	n, err := up.Read(b[:])
	_ = up.SetReadDeadline(time.Time{})
	switch {
	case n == 1 && b[0] == guest.EgressRelayAck:
		e.noHandoff.Store(true)
		return false, nil
	case n == 0 && errors.Is(err, io.EOF):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("handing a connection to the egress socket %s: %w", e.Socket, err)
	default:
		return false, fmt.Errorf("handing a connection to the egress socket %s: unexpected answer %q", e.Socket, b[:n])
	}
}

// closeWrite half-closes a connection that supports it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
