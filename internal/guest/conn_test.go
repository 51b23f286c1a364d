package guest

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeGuest is the guest's end of a connection, driven by hand, to check
// how the daemon treats a guest that breaks the rules.
type fakeGuest struct {
	nc net.Conn
	br *bufio.Reader
}

func dialFake(t *testing.T, path, token string) (*fakeGuest, Frame) {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	h := Hello{Version: ProtocolVersion, Token: []byte(token), GuestVersion: "fake", Pid: 4242}
	if _, err := nc.Write(AppendFrame(nil, FrameHello, 0, h.Encode())); err != nil {
		t.Fatal(err)
	}
	g := &fakeGuest{nc: nc, br: bufio.NewReader(nc)}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, err := ReadFrame(g.br)
	if err != nil {
		t.Fatalf("reading the daemon's answer: %v", err)
	}
	nc.SetReadDeadline(time.Time{})
	return g, f
}

func (g *fakeGuest) send(t *testing.T, typ FrameType, stream uint32, payload []byte) {
	t.Helper()
	if _, err := g.nc.Write(AppendFrame(nil, typ, stream, payload)); err != nil {
		t.Fatal(err)
	}
}

// connected returns a daemon Conn and the fake guest behind it.
func connected(t *testing.T, opts ListenOptions) (*Conn, *fakeGuest) {
	t.Helper()
	token, _ := NewToken()
	path := filepath.Join(shortDir(t), "agentbox.sock")
	ln, err := Listen(path, token, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	g, f := dialFake(t, path, token)
	if f.Type != FrameHelloOK {
		t.Fatalf("daemon answered %s, want hello-ok", f.Type)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Info() != (GuestInfo{Version: "fake", Pid: 4242}) {
		t.Errorf("guest info %+v", c.Info())
	}
	return c, g
}

func TestListenerRefusesBadGuests(t *testing.T) {
	t.Parallel()
	token, _ := NewToken()
	path := filepath.Join(shortDir(t), "agentbox.sock")
	ln, err := Listen(path, token, ListenOptions{HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	_, f := dialFake(t, path, token[:len(token)-1]+"x")
	if f.Type != FrameError {
		t.Fatalf("wrong token: daemon answered %s, want error", f.Type)
	}
	if kind, _, _ := DecodeError(f.Payload); kind != ErrKindAuth {
		t.Errorf("wrong token: error kind %d, want auth", kind)
	}
	// A connection that never says hello is dropped after the timeout.
	silent, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Error("a silent connection got data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("a silent connection was not dropped")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if c, err := ln.Accept(ctx); err == nil {
		t.Fatalf("accepted %+v", c.Info())
	}
	// Listen refuses to replace a file that is not a socket.
	if _, err := Listen(filepath.Join(shortDir(t)), token, ListenOptions{}); err == nil {
		t.Error("Listen replaced a directory")
	}
	if _, err := Listen(filepath.Join(shortDir(t), "s"), "short", ListenOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("short token: %v", err)
	}
}

func TestDaemonCutsOffMisbehavingGuest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		abuse func(t *testing.T, g *fakeGuest, id uint32)
	}{
		{"output beyond the window", func(t *testing.T, g *fakeGuest, id uint32) {
			g.send(t, FrameStdout, id, make([]byte, InitialWindow+1))
		}},
		{"output for a stream never opened", func(t *testing.T, g *fakeGuest, id uint32) {
			g.send(t, FrameStdout, id+100, []byte("x"))
		}},
		{"a frame type the guest does not send", func(t *testing.T, g *fakeGuest, id uint32) {
			g.send(t, FrameOpen, id, []byte{0})
		}},
		{"an unknown frame type", func(t *testing.T, g *fakeGuest, id uint32) {
			g.nc.Write([]byte{0, 0, 0, 1, 200, 0, 0, 0, 1, 0})
		}},
		{"a second start", func(t *testing.T, g *fakeGuest, id uint32) {
			g.send(t, FrameStarted, id, EncodeU32(2))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, g := connected(t, ListenOptions{})
			done := make(chan struct{})
			var res ExecResult
			var err error
			go func() {
				defer close(done)
				res, err = c.Exec(t.Context(), ExecRequest{Argv: []string{"x"}}, nil, nil, nil)
			}()
			f, rerr := ReadFrame(g.br)
			if rerr != nil || f.Type != FrameOpen {
				t.Fatalf("guest got %v %v, want open", f.Type, rerr)
			}
			g.send(t, FrameStarted, f.Stream, EncodeU32(1))
			tt.abuse(t, g, f.Stream)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Exec did not return")
			}
			if err != nil || !res.Lost {
				t.Errorf("got %v %+v, want Lost", err, res)
			}
			<-c.Done()
			if !errors.Is(c.Err(), ErrProtocol) {
				t.Errorf("connection ended with %v, want ErrProtocol", c.Err())
			}
		})
	}
}

func TestSilentGuestIsDeclaredDead(t *testing.T) {
	t.Parallel()
	c, g := connected(t, ListenOptions{KeepAlive: 50 * time.Millisecond})
	// The guest reads (so writes do not block) but never answers.
	go func() {
		for {
			if _, err := ReadFrame(g.br); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	res, err := c.Exec(t.Context(), ExecRequest{Argv: []string{"x"}}, nil, nil, nil)
	if !errors.Is(err, ErrClosed) || !res.Lost {
		t.Fatalf("got %v %+v, want ErrClosed and Lost", err, res)
	}
	// The guest never confirmed the start: the command is one the
	// manager may run elsewhere.
	if !errors.Is(err, ErrNotSent) {
		t.Errorf("a command whose start was never confirmed: %v, want ErrNotSent", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s to give up on a silent guest", d)
	}
}

// A command for a guest that is already gone is reported as never sent,
// with nothing of its input read: the manager may safely run it elsewhere.
func TestCommandToDeadGuestIsNotSent(t *testing.T) {
	t.Parallel()
	c, g := connected(t, ListenOptions{})
	g.nc.Close()
	in := &countingReader{r: strings.NewReader("input that must stay unread")}
	for range 2 { // right after the close, and once the daemon has seen it
		res, err := c.Exec(t.Context(), ExecRequest{Argv: []string{"x"}}, in, nil, nil)
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotSent) || !res.Lost {
			t.Fatalf("got %v %+v, want ErrClosed, ErrNotSent and Lost", err, res)
		}
		<-c.Done()
	}
	if in.n != 0 {
		t.Errorf("%d bytes of the unsent command's input were read", in.n)
	}
}

// A command whose start the guest confirmed is never "not sent", however
// the guest ends after that: it may have run, and must not run twice. Its
// input flows only after the confirmation.
func TestConfirmedCommandIsNotRetried(t *testing.T) {
	t.Parallel()
	c, g := connected(t, ListenOptions{})
	in := &countingReader{r: strings.NewReader("input")}
	go func() {
		for {
			f, err := ReadFrame(g.br)
			if err != nil {
				return
			}
			if f.Type == FrameOpen {
				if in.n != 0 {
					t.Errorf("%d bytes of input were read before the start was confirmed", in.n)
				}
				g.send(t, FrameStarted, f.Stream, EncodeU32(77))
				g.nc.Close()
				return
			}
		}
	}()
	res, err := c.Exec(t.Context(), ExecRequest{Argv: []string{"x"}}, in, nil, nil)
	if errors.Is(err, ErrNotSent) || !res.Lost {
		t.Errorf("a confirmed command lost after its start: %v %+v, want Lost without ErrNotSent", err, res)
	}
}
