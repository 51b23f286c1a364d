package guest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sampleRequest() ExecRequest {
	return ExecRequest{
		Argv:           []string{"sh", "-c", "echo hi; exit 3", ""},
		Env:            []string{"A=1", "EMPTY=", "UNICODE=héllo"},
		Dir:            "/workspace/sub dir",
		Timeout:        90 * time.Second,
		KillGrace:      250 * time.Millisecond,
		MaxOutputBytes: 12345,
		TTY:            true,
		Rows:           40,
		Cols:           132,
	}
}

// validFrames is one valid frame of every type.
func validFrames() []Frame {
	req := sampleRequest()
	return []Frame{
		{FrameHello, 0, Hello{Version: ProtocolVersion, Token: []byte("0123456789abcdef"), GuestVersion: "v1", Pid: 1}.Encode()},
		{FrameHelloOK, 0, []byte{0, 1}},
		{FrameOpen, 1, EncodeExecRequest(&req)},
		{FrameStdin, 1, []byte("input")},
		{FrameStdinClose, 1, nil},
		{FrameStdout, 1, []byte("out")},
		{FrameStderr, 1, []byte("err")},
		{FrameSignal, 1, []byte{2}},
		{FrameResize, 1, EncodeResize(50, 132)},
		{FrameKill, 1, []byte{9}},
		{FrameStarted, 7, EncodeU32(42)},
		{FrameExit, 1, EncodeExit(ExecResult{ExitCode: 137, Signal: 9, TimedOut: true, StdoutBytes: 5, Duration: time.Second})},
		{FrameExit, 2, EncodeExit(ExecResult{StdoutBytes: 1, Duration: time.Second, UserCPU: time.Second, SysCPU: 2, PeakMemBytes: 1 << 20})},
		{FrameError, 0, EncodeError(ErrKindAuth, "token refused")},
		{FrameError, 3, EncodeError(ErrKindNotFound, "no such file")},
		{FramePing, 0, make([]byte, 8)},
		{FramePong, 0, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{FrameWindow, 1, EncodeWindow(ChanStdout, 4096)},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	frames := validFrames()
	var stream []byte
	for _, f := range frames {
		stream = AppendFrame(stream, f.Type, f.Stream, f.Payload)
	}
	// ReadFrame over the concatenation.
	r := bytes.NewReader(stream)
	for i, want := range frames {
		got, err := ReadFrame(r)
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, want.Type, err)
		}
		if diff := cmp.Diff(normalize(want), normalize(got)); diff != "" {
			t.Errorf("frame %d (%s) (-want +got):\n%s", i, want.Type, diff)
		}
	}
	if _, err := ReadFrame(r); err != io.EOF {
		t.Fatalf("after the last frame: got %v, want io.EOF", err)
	}
	// DecodeFrame over the same bytes.
	b := stream
	for i, want := range frames {
		got, n, err := DecodeFrame(b)
		if err != nil {
			t.Fatalf("decode frame %d: %v", i, err)
		}
		if diff := cmp.Diff(normalize(want), normalize(got)); diff != "" {
			t.Errorf("decode frame %d (-want +got):\n%s", i, diff)
		}
		b = b[n:]
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left over", len(b))
	}
}

func normalize(f Frame) Frame {
	if len(f.Payload) == 0 {
		f.Payload = nil
	}
	return f
}

func TestPayloadRoundTrip(t *testing.T) {
	req := sampleRequest()
	got, err := DecodeExecRequest(EncodeExecRequest(&req))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(req, got); diff != "" {
		t.Errorf("exec request (-want +got):\n%s", diff)
	}

	res := ExecResult{ExitCode: -1, Signal: 15, TimedOut: true, Canceled: true, StdoutTruncated: true,
		StderrTruncated: true, StdoutBytes: 1 << 40, StderrBytes: 7, Duration: 3 * time.Hour}
	gotRes, err := DecodeExit(EncodeExit(res))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, gotRes); diff != "" {
		t.Errorf("exit (-want +got):\n%s", diff)
	}
	// With resource usage, and as a guest from before usage sends it.
	res.UserCPU, res.SysCPU, res.PeakMemBytes = 1500*time.Millisecond, time.Millisecond, 64<<20
	if gotRes, err = DecodeExit(EncodeExit(res)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, gotRes); diff != "" {
		t.Errorf("exit with usage (-want +got):\n%s", diff)
	}
	if n := len(EncodeExit(ExecResult{ExitCode: 1})); n != exitPayloadSize {
		t.Errorf("exit without usage is %d bytes, want the first version's %d", n, exitPayloadSize)
	}
	if gotRes, err = DecodeExit(EncodeExit(res)[:exitPayloadSize]); err != nil || gotRes.CPU() != 0 || gotRes.ExitCode != res.ExitCode {
		t.Errorf("first-version exit: %+v, %v", gotRes, err)
	}
	if _, err := DecodeExit(append(EncodeExit(ExecResult{}), make([]byte, 24)...)); err == nil {
		t.Error("exit with empty usage decoded")
	}

	for _, h := range []Hello{
		{Version: 1, Token: []byte("tok"), GuestVersion: "dev", Pid: 1},
		{Version: 1, Token: []byte("tok"), GuestVersion: "dev", Pid: 1,
			Landlock: LandlockStatus{Mode: LandlockRequired, ABI: 7, Enforced: true, Detail: "everything"}},
		{Version: 1, Token: []byte("tok"), GuestVersion: "dev", Pid: 1,
			Landlock: LandlockStatus{Mode: LandlockBestEffort, Detail: "landlock_create_ruleset: function not implemented"}},
	} {
		gotH, err := DecodeHello(h.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(h, gotH); diff != "" {
			t.Errorf("hello (-want +got):\n%s", diff)
		}
	}
	// A guest from before Landlock sends no status: it never applies one.
	var e encoder
	e.u16(1)
	e.bytes([]byte("tok"))
	e.bytes([]byte("old"))
	e.u32(7)
	old, err := DecodeHello(e.b)
	if err != nil {
		t.Fatalf("hello of an older guest: %v", err)
	}
	if diff := cmp.Diff(Hello{Version: 1, Token: []byte("tok"), GuestVersion: "old", Pid: 7}, old); diff != "" {
		t.Errorf("hello of an older guest (-want +got):\n%s", diff)
	}

	kind, msg, err := DecodeError(EncodeError(ErrKindStart, strings.Repeat("x", 10000)))
	if err != nil || kind != ErrKindStart || len(msg) != maxErrorMessage {
		t.Errorf("long error: kind %d, %d bytes, %v; want cut to %d", kind, len(msg), err, maxErrorMessage)
	}
}

func TestFrameLimits(t *testing.T) {
	header := func(n uint32, typ FrameType, stream uint32) []byte {
		b := make([]byte, HeaderSize)
		binary.BigEndian.PutUint32(b, n)
		b[4] = byte(typ)
		binary.BigEndian.PutUint32(b[5:], stream)
		return b
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"unknown type 0", header(0, 0, 1)},
		{"unknown type past the end", header(1, frameTypeEnd, 1)},
		{"unknown type 255", header(1, 255, 1)},
		{"oversized data", header(MaxFrameSize+1, FrameStdout, 1)},
		{"4 GiB length", header(0xffffffff, FrameOpen, 1)},
		{"empty data frame", header(0, FrameStdout, 1)},
		{"signal with two bytes", append(header(2, FrameSignal, 1), 9, 9)},
		{"exit too short", append(header(3, FrameExit, 1), 0, 0, 0)},
		{"hello on a stream", append(header(4, FrameHello, 5), 0, 1, 0, 0)},
		{"data on stream 0", append(header(1, FrameStdin, 0), 'x')},
		{"ping too long", append(header(9, FramePing, 0), make([]byte, 9)...)},
		{"oversized error", header(1+maxErrorMessage+1, FrameError, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The header alone must be refused: nothing is read or allocated
			// for a payload that breaks the rules.
			r := &countingReader{r: bytes.NewReader(tt.in)}
			_, err := ReadFrame(r)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("ReadFrame: got %v, want ErrProtocol", err)
			}
			if r.n != HeaderSize {
				t.Errorf("ReadFrame read %d bytes, want only the %d-byte header", r.n, HeaderSize)
			}
			if _, _, err := DecodeFrame(tt.in); !errors.Is(err, ErrProtocol) {
				t.Errorf("DecodeFrame: got %v, want ErrProtocol", err)
			}
		})
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestFrameTruncated(t *testing.T) {
	full := AppendFrame(nil, FrameStdout, 1, []byte("hello"))
	for i := 1; i < len(full); i++ {
		if _, err := ReadFrame(bytes.NewReader(full[:i])); err != io.ErrUnexpectedEOF {
			t.Errorf("ReadFrame of %d/%d bytes: got %v, want io.ErrUnexpectedEOF", i, len(full), err)
		}
		if _, _, err := DecodeFrame(full[:i]); err != io.ErrUnexpectedEOF {
			t.Errorf("DecodeFrame of %d/%d bytes: got %v, want io.ErrUnexpectedEOF", i, len(full), err)
		}
	}
}

func TestPayloadCorrupt(t *testing.T) {
	req := sampleRequest()
	good := EncodeExecRequest(&req)
	tests := []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"unknown flag", append([]byte{0x80}, good[1:]...)},
		{"trailing byte", append(append([]byte{}, good...), 0)},
		{"cut", good[:len(good)-1]},
		{"argv count larger than the payload", append(append([]byte{}, good[:len(good)-1]...), 0xff, 0xff, 0x03)},
		{"no argv", EncodeExecRequest(&ExecRequest{Argv: nil})},
		{"env without =", EncodeExecRequest(&ExecRequest{Argv: []string{"true"}, Env: []string{"NOEQUALS"}})},
		{"relative dir", EncodeExecRequest(&ExecRequest{Argv: []string{"true"}, Dir: "rel"})},
		{"NUL in argument", EncodeExecRequest(&ExecRequest{Argv: []string{"a\x00b"}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeExecRequest(tt.p); err == nil {
				t.Fatal("corrupt request decoded without error")
			}
		})
	}
	if _, err := DecodeExit(make([]byte, exitPayloadSize-1)); err == nil {
		t.Error("short exit decoded")
	}
	badFlags := EncodeExit(ExecResult{})
	badFlags[5] = 0xf0
	if _, err := DecodeExit(badFlags); err == nil {
		t.Error("exit with unknown flags decoded")
	}
	if _, _, err := DecodeWindow(EncodeWindow(ChanStdout, 0)); err == nil {
		t.Error("zero window decoded")
	}
	if _, _, err := DecodeWindow(EncodeWindow(numChannels, 1)); err == nil {
		t.Error("window on an unknown channel decoded")
	}
	if _, _, err := DecodeError([]byte{99, 'x'}); err == nil {
		t.Error("unknown error kind decoded")
	}
	if _, err := DecodeSignal([]byte{0}); err == nil {
		t.Error("signal 0 decoded")
	}
	if _, err := DecodeHello(append(Hello{Token: bytes.Repeat([]byte("t"), maxToken+1)}.Encode(), 0)); err == nil {
		t.Error("hello with an oversized token decoded")
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"unknown landlock mode":  func(b []byte) []byte { b[len(b)-4] = byte(landlockModeEnd); return b },
		"unknown landlock flags": func(b []byte) []byte { b[len(b)-2] = 0x80; return b },
		"landlock status cut":    func(b []byte) []byte { return b[:len(b)-2] },
		"trailing byte":          func(b []byte) []byte { return append(b, 0) },
	} {
		b := mutate(Hello{Version: 1, Token: []byte("tok"), Landlock: LandlockStatus{Mode: LandlockRequired}}.Encode())
		if _, err := DecodeHello(b); err == nil {
			t.Errorf("hello with %s decoded", name)
		}
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the decoders. Whatever they
// accept must re-encode to the same bytes; nothing may panic or allocate
// past the limits.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range validFrames() {
		f.Add(AppendFrame(nil, fr.Type, fr.Stream, fr.Payload))
	}
	f.Add(AppendFrame(AppendFrame(nil, FrameStdout, 1, []byte("a")), FrameExit, 1, EncodeExit(ExecResult{})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, byte(FrameOpen), 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 1, 99, 0, 0, 0, 1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		rest := b
		for len(rest) > 0 {
			fr, n, err := DecodeFrame(rest)
			if err != nil {
				if !errors.Is(err, ErrProtocol) && err != io.ErrUnexpectedEOF {
					t.Fatalf("unexpected error class: %v", err)
				}
				// ReadFrame must agree.
				if _, rerr := ReadFrame(bytes.NewReader(rest)); rerr == nil {
					t.Fatalf("DecodeFrame failed (%v) but ReadFrame succeeded", err)
				}
				return
			}
			if len(fr.Payload) > MaxFrameSize {
				t.Fatalf("payload of %d bytes accepted", len(fr.Payload))
			}
			if re := AppendFrame(nil, fr.Type, fr.Stream, fr.Payload); !bytes.Equal(re, rest[:n]) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", re, rest[:n])
			}
			decodePayload(t, fr)
			rest = rest[n:]
		}
	})
}

// decodePayload runs the payload decoder of fr's type and checks that what
// it accepts survives a round trip.
func decodePayload(t *testing.T, fr Frame) {
	switch fr.Type {
	case FrameOpen:
		if req, err := DecodeExecRequest(fr.Payload); err == nil {
			again, err := DecodeExecRequest(EncodeExecRequest(&req))
			if err != nil {
				t.Fatalf("re-decoding an accepted request: %v", err)
			}
			if diff := cmp.Diff(req, again); diff != "" {
				t.Fatalf("request round trip (-first +second):\n%s", diff)
			}
		}
	case FrameExit:
		if res, err := DecodeExit(fr.Payload); err == nil {
			if !bytes.Equal(EncodeExit(res), fr.Payload) {
				t.Fatalf("exit round trip differs")
			}
		}
	case FrameHello:
		// Not byte for byte: a hello without a Landlock status (an older
		// guest) re-encodes with the zero status.
		if h, err := DecodeHello(fr.Payload); err == nil {
			again, err := DecodeHello(h.Encode())
			if err != nil {
				t.Fatalf("re-decoding an accepted hello: %v", err)
			}
			if diff := cmp.Diff(h, again); diff != "" {
				t.Fatalf("hello round trip (-first +second):\n%s", diff)
			}
		}
	case FrameError:
		DecodeError(fr.Payload)
	case FrameWindow:
		DecodeWindow(fr.Payload)
	case FrameResize:
		DecodeResize(fr.Payload)
	case FrameSignal, FrameKill:
		DecodeSignal(fr.Payload)
	}
}
