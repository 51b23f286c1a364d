package guest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errSecondHello is a hello on a connection that is past its handshake:
// whatever sent it, the connection is not trusted any more.
var errSecondHello = fmt.Errorf("%w: a second hello on the guest's connection", ErrProtocol)

// GuestInfo is what a guest says about itself when it connects.
type GuestInfo struct {
	Version string
	Pid     int
	// Landlock says whether the guest runs its commands under Landlock.
	Landlock LandlockStatus
}

// Conn is the daemon's end of one authenticated guest connection. It
// multiplexes any number of concurrent commands. Its read loop never waits
// for a caller: data goes to per-channel queues that flow control bounds.
type Conn struct {
	nc        net.Conn
	br        *bufio.Reader
	w         *FrameWriter
	log       *slog.Logger
	info      GuestInfo
	keepAlive time.Duration
	// refuse reports a second hello on this connection (see Listener).
	refuse func(net.Conn, string)

	// openMu keeps FrameOpen frames in stream id order: the guest refuses
	// an id that is not above every id before it.
	openMu sync.Mutex

	mu       sync.Mutex
	streams  map[uint32]*Process
	nextID   uint32
	pings    map[uint64]chan struct{}
	nextPing uint64

	closeOnce sync.Once
	done      chan struct{}
	err       error // why the connection ended; set before done closes

	lastRecv atomic.Int64 // unix nanoseconds of the last frame received
}

func newConn(nc net.Conn, br *bufio.Reader, w *FrameWriter, info GuestInfo, opts ListenOptions, refuse func(net.Conn, string)) *Conn {
	c := &Conn{
		nc:        nc,
		br:        br,
		w:         w,
		log:       opts.Logger,
		info:      info,
		keepAlive: opts.KeepAlive,
		refuse:    refuse,
		streams:   make(map[uint32]*Process),
		pings:     make(map[uint64]chan struct{}),
		done:      make(chan struct{}),
	}
	c.lastRecv.Store(time.Now().UnixNano())
	go c.readLoop()
	go c.keepAliveLoop()
	return c
}

// Info is what the guest said about itself.
func (c *Conn) Info() GuestInfo { return c.info }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended, once Done is closed.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close ends the connection. Running commands end Lost; the guest kills
// them when it sees the connection go.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// fail ends the connection for reason err, once.
func (c *Conn) fail(err error) {
	c.closeOnce.Do(func() {
		c.err = err
		close(c.done)
		c.nc.Close()
		c.mu.Lock()
		streams := c.streams
		c.streams = nil
		c.mu.Unlock()
		for _, p := range streams {
			p.finish(finishLost, ExecResult{}, nil)
		}
		if !errors.Is(err, ErrClosed) {
			c.log.Warn("guest connection ended", "guest_pid", c.info.Pid, "error", err)
		}
	})
}

// Ping measures a round trip to the guest.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	ch := make(chan struct{})
	c.mu.Lock()
	c.nextPing++
	id := c.nextPing
	c.pings[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pings, id)
		c.mu.Unlock()
	}()
	start := time.Now()
	if err := c.w.WriteFrame(FramePing, 0, binary.BigEndian.AppendUint64(nil, id)); err != nil {
		c.fail(err)
		return 0, fmt.Errorf("pinging guest: %w", ErrClosed)
	}
	select {
	case <-ch:
		return time.Since(start), nil
	case <-c.done:
		return 0, fmt.Errorf("pinging guest: %w", ErrClosed)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (c *Conn) keepAliveLoop() {
	t := time.NewTicker(c.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, c.lastRecv.Load()))
		if idle > 3*c.keepAlive {
			c.fail(fmt.Errorf("guest silent for %s", idle.Round(time.Millisecond)))
			return
		}
		if idle >= c.keepAlive {
			// Id 0 is never waited for: the pong only proves liveness.
			if err := c.w.WriteFrame(FramePing, 0, make([]byte, 8)); err != nil {
				c.fail(err)
				return
			}
		}
	}
}

func (c *Conn) readLoop() {
	for {
		f, err := readFrame(c.br, true)
		if err != nil {
			c.fail(fmt.Errorf("reading from guest: %w", err))
			return
		}
		c.lastRecv.Store(time.Now().UnixNano())
		if err := c.dispatch(f); err != nil {
			c.w.WriteFrame(FrameError, 0, EncodeError(ErrKindProtocol, err.Error()))
			if errors.Is(err, errSecondHello) && c.refuse != nil {
				c.refuse(c.nc, err.Error())
			}
			c.fail(err)
			return
		}
	}
}

// dispatch handles one frame from the guest without blocking.
func (c *Conn) dispatch(f Frame) error {
	switch f.Type {
	case FramePing:
		// Inline, so that a guest flooding pings costs no goroutines; a
		// guest that does not read its pongs hits the write timeout.
		return c.w.WriteFrame(FramePong, 0, f.Payload)
	case FramePong:
		id := binary.BigEndian.Uint64(f.Payload)
		c.mu.Lock()
		ch := c.pings[id]
		delete(c.pings, id)
		c.mu.Unlock()
		if ch != nil {
			close(ch)
		}
		return nil
	case FrameError:
		if f.Stream == 0 {
			_, msg, err := DecodeError(f.Payload)
			if err != nil {
				return err
			}
			return fmt.Errorf("guest reported: %s", msg)
		}
	case FrameStdout, FrameStderr, FrameStarted, FrameExit, FrameWindow:
	case FrameHello:
		return errSecondHello
	default:
		return fmt.Errorf("%w: unexpected %s frame from guest", ErrProtocol, f.Type)
	}
	c.mu.Lock()
	p := c.streams[f.Stream]
	known := f.Stream <= c.nextID
	c.mu.Unlock()
	if p == nil {
		if !known {
			return fmt.Errorf("%w: %s frame for stream %d that was never opened", ErrProtocol, f.Type, f.Stream)
		}
		return nil // a frame that crossed the stream's end
	}
	return p.handle(f)
}

// register allocates a stream id for p.
func (c *Conn) register(p *Process) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		return fmt.Errorf("guest connection: %w", ErrClosed)
	}
	c.nextID++
	p.id = c.nextID
	c.streams[p.id] = p
	return nil
}

func (c *Conn) unregister(id uint32) {
	c.mu.Lock()
	if c.streams != nil {
		delete(c.streams, id)
	}
	c.mu.Unlock()
}
