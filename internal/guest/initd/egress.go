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
	"time"
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
}

// egressDialTimeout bounds the connection to the daemon's egress socket.
const egressDialTimeout = 5 * time.Second

// Listener opens the loopback listener. Only a loopback address is served:
// the relay must never be reachable from anywhere but the sandbox itself.
func (e Egress) Listener() (net.Listener, error) {
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
func (e Egress) Serve(ctx context.Context, ln net.Listener) error {
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
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
			if err := e.relay(ctx, c); err != nil {
				log.Warn("egress relay", "error", err)
			}
		}()
	}
}

// relay carries one connection to the egress socket and back. Each
// direction's end of data is passed on as a half-close, so a client that
// shuts down its writing side still reads the whole answer.
func (e Egress) relay(ctx context.Context, c net.Conn) error {
	defer c.Close()
	d := net.Dialer{Timeout: egressDialTimeout}
	up, err := d.DialContext(ctx, "unix", e.Socket)
	if err != nil {
		return fmt.Errorf("dialing the egress socket %s: %w", e.Socket, err)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(up, c)
		closeWrite(up)
	}()
	io.Copy(c, up)
	closeWrite(c)
	<-done
	return nil
}

// closeWrite half-closes a connection that supports it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}
