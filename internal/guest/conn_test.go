package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync"
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

// refusals collects what a Listener reports through OnRefused.
type refusals struct {
	mu  sync.Mutex
	got []Refusal
}

func (r *refusals) add(x Refusal) {
	r.mu.Lock()
	r.got = append(r.got, x)
	r.mu.Unlock()
}

// wait returns the reasons of the first n refusals, or fails.
func (r *refusals) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := append([]Refusal(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n {
			var reasons []string
			for _, x := range got {
				reasons = append(reasons, x.Reason)
			}
			return reasons
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals reported, want %d: %+v", len(got), n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenerReportsRefusals checks that every connection that is not the
// guest's first is refused, logged and reported (SECURITY.md H44), with
// the peer's credentials.
func TestListenerReportsRefusals(t *testing.T) {
	t.Parallel()
	var rep refusals
	var log syncBuffer
	opts := ListenOptions{HandshakeTimeout: 300 * time.Millisecond, OnRefused: rep.add,
		Logger: slog.New(slog.NewJSONHandler(&log, nil))}
	token, _ := NewToken()
	path := filepath.Join(shortDir(t), "agentbox.sock")
	ln, err := Listen(path, token, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	steps := []struct {
		what   string
		do     func(t *testing.T)
		reason string
	}{
		{"silent", func(t *testing.T) {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}, "no hello"},
		{"not a hello", func(t *testing.T) {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(AppendFrame(nil, FramePing, 0, make([]byte, 8)))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.Read(make([]byte, 1))
		}, "first frame is ping"},
		{"wrong token", func(t *testing.T) {
			if _, f := dialFake(t, path, token[:len(token)-1]+"x"); f.Type != FrameError {
				t.Errorf("answered %s, want error", f.Type)
			}
		}, "wrong token"},
		{"the guest", func(t *testing.T) {
			if _, f := dialFake(t, path, token); f.Type != FrameHelloOK {
				t.Fatalf("answered %s, want hello-ok", f.Type)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			c, err := ln.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}, ""},
		{"a second connection with the token", func(t *testing.T) {
			if _, f := dialFake(t, path, token); f.Type != FrameError {
				t.Errorf("answered %s, want error", f.Type)
			} else if kind, _, _ := DecodeError(f.Payload); kind != ErrKindAuth {
				t.Errorf("error kind %d, want auth", kind)
			}
		}, "second hello"},
	}
	n := 0
	for _, st := range steps {
		st.do(t)
		if st.reason == "" {
			continue
		}
		n++
		reasons := rep.wait(t, n)
		if !strings.Contains(reasons[n-1], st.reason) {
			t.Errorf("%s: refused for %q, want %q", st.what, reasons[n-1], st.reason)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if c, err := ln.Accept(ctx); err == nil {
		t.Errorf("a second connection was accepted: %+v", c.Info())
	}
	rep.mu.Lock()
	for _, r := range rep.got {
		if r.PeerPID != os.Getpid() || r.PeerUID != os.Getuid() {
			t.Errorf("refusal %q: peer %d/%d, want this process %d/%d", r.Reason, r.PeerPID, r.PeerUID, os.Getpid(), os.Getuid())
		}
	}
	rep.mu.Unlock()
	if got := strings.Count(log.String(), `"msg":"guest connection refused"`); got != n {
		t.Errorf("%d refusals logged, want %d:\n%s", got, n, log.String())
	}
}

// TestSecondHelloEndsTheConnection checks that a hello on a connection past
// its handshake is refused and ends it.
func TestSecondHelloEndsTheConnection(t *testing.T) {
	t.Parallel()
	var rep refusals
	c, g := connected(t, ListenOptions{OnRefused: rep.add})
	h := Hello{Version: ProtocolVersion, Token: []byte("x"), GuestVersion: "fake", Pid: 4242}
	g.send(t, FrameHello, 0, h.Encode())
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the connection survived a second hello")
	}
	if !errors.Is(c.Err(), ErrProtocol) {
		t.Errorf("ended with %v, want ErrProtocol", c.Err())
	}
	if r := rep.wait(t, 1); !strings.Contains(r[0], "second hello") {
		t.Errorf("refused for %q", r[0])
	}
}

// TestListenerOwner checks the socket's owner and mode when the guest has
// a user of its own.
func TestListenerOwner(t *testing.T) {
	t.Parallel()
	token, _ := NewToken()
	for _, tt := range []struct {
		owner *Owner
		mode  os.FileMode
	}{{nil, 0o666}, {&Owner{UID: os.Getuid(), GID: os.Getgid()}, 0o600}} {
		path := filepath.Join(shortDir(t), "agentbox.sock")
		ln, err := Listen(path, token, ListenOptions{Owner: tt.owner})
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != tt.mode {
			t.Errorf("owner %+v: mode %v, want %v", tt.owner, fi.Mode().Perm(), tt.mode)
		}
		ln.Close()
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

// A command that floods its output costs the daemon no memory per frame:
// each frame's payload is handed back once it is written, so the heap
// follows what is held (the window), not what flowed. Frames come in
// sizes from every class, and one below them. The writer checks every
// byte, so that a payload handed back while still queued shows up as
// output from the wrong offset. Not parallel: it counts the process's
// allocations.
func TestOutputFloodReusesPayloads(t *testing.T) {
	const total = 64 << 20
	sizes := []int{chunkSize, 4096, 1001, minPooled - 1, 20000, minPooled}
	c, g := connected(t, ListenOptions{})
	go func() {
		f, err := ReadFrame(g.br)
		if err != nil || f.Type != FrameOpen {
			t.Errorf("guest got %v %v, want open", f.Type, err)
			return
		}
		id := f.Stream
		g.send(t, FrameStarted, id, EncodeU32(1))
		buf := make([]byte, HeaderSize+chunkSize) // one buffer: the guest's own frames make no garbage
		window := InitialWindow
		for off, i := 0, 0; off < total; {
			n := min(sizes[i%len(sizes)], total-off)
			if window < n {
				f, err := ReadFrame(g.br)
				if err != nil {
					t.Errorf("guest waiting for window: %v", err)
					return
				}
				if ch, k, err := DecodeWindow(f.Payload); f.Type == FrameWindow && err == nil && ch == ChanStdout {
					window += int(k)
				}
				continue
			}
			PutHeader(buf, FrameStdout, id, n)
			for j := range n {
				buf[HeaderSize+j] = streamByte(off + j)
			}
			if _, err := g.nc.Write(buf[:HeaderSize+n]); err != nil {
				t.Errorf("guest sending output: %v", err)
				return
			}
			window -= n
			off += n
			i++
		}
		g.send(t, FrameExit, id, EncodeExit(ExecResult{}))
	}()
	var w streamChecker
	before := allocatedBytes()
	res, err := c.Exec(t.Context(), ExecRequest{Argv: []string{"x"}}, nil, &w, nil)
	allocated := allocatedBytes() - before
	if err != nil || res.ExitCode != 0 || w.n != total || w.bad != "" {
		t.Fatalf("exec: %v %+v, %d bytes written %s", err, res, w.n, w.bad)
	}
	// A fresh payload per frame is 64 MiB; what is left is the payloads
	// below the smallest class, a few small allocations per frame (its
	// window grant) and the pool's buffers.
	if allocated > 8<<20 && !raceEnabled {
		t.Errorf("the daemon allocated %d MiB while 64 MiB of output went through it", allocated>>20)
	}
}

// streamByte is byte o of TestOutputFloodReusesPayloads's stream. 251 is
// prime, so no frame size repeats the pattern.
func streamByte(o int) byte { return byte(o % 251) }

// streamChecker checks every byte written to it against streamByte.
type streamChecker struct {
	n   int
	bad string
}

func (w *streamChecker) Write(p []byte) (int, error) {
	for i, b := range p {
		if o := w.n + i; b != streamByte(o) && w.bad == "" {
			w.bad = fmt.Sprintf("byte %d of the stream is %d, want %d", o, b, streamByte(o))
		}
	}
	w.n += len(p)
	return len(p), nil
}

// allocatedBytes is what the process has allocated on the heap so far.
func allocatedBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Every size of output payload gets a buffer that holds it and, from
// minPooled, at most twice its bytes; a recycled buffer returns to the
// class it came from.
func TestOutputPayloadSizes(t *testing.T) {
	if minPooled<<(len(outPayloads)-1) != chunkSize {
		t.Fatalf("the largest class holds %d bytes, not chunkSize", minPooled<<(len(outPayloads)-1))
	}
	sizes := []int{1, minPooled - 1, chunkSize + 1, InitialWindow}
	for c := minPooled; c <= chunkSize; c *= 2 {
		sizes = append(sizes, c/2+1, c-1, c)
	}
	for _, n := range sizes {
		b := outputPayload(n)
		if len(b) != n || cap(b) < n || (n >= minPooled && cap(b) >= 2*n) {
			t.Errorf("a payload of %d bytes got len %d cap %d", n, len(b), cap(b))
		}
		recycleOutput(b)
		if again := outputPayload(n); cap(again) != cap(b) {
			t.Errorf("a payload of %d bytes got cap %d after one of cap %d was recycled", n, cap(again), cap(b))
		}
	}
}
