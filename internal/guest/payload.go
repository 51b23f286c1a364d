package guest

import (
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"
)

// ProtocolVersion is the version of the frame protocol; both ends must speak
// the same one. Version 2 added FrameDial.
const ProtocolVersion uint16 = 2

// Channel is one direction of data on a stream, the unit of flow control.
type Channel uint8

// The channels.
const (
	ChanStdin Channel = iota
	ChanStdout
	ChanStderr
	numChannels
)

func (c Channel) String() string {
	switch c {
	case ChanStdin:
		return "stdin"
	case ChanStdout:
		return "stdout"
	case ChanStderr:
		return "stderr"
	}
	return fmt.Sprintf("channel-%d", uint8(c))
}

// InitialWindow is the credit each side starts with on each channel of a
// new stream: the most data of one channel that may be in flight or
// buffered, unacknowledged, at any time.
const InitialWindow = 256 << 10

// maxWindow bounds the credit a peer can accumulate; more is a violation.
const maxWindow = 1 << 30

// Hello is the guest's first frame.
type Hello struct {
	Version      uint16
	Token        []byte
	GuestVersion string
	Pid          uint32
	// Landlock is the guest's Landlock status. It travels after the
	// fields above, and a hello without it decodes as the zero status
	// (a guest from before Landlock, which never applies it).
	Landlock LandlockStatus
}

const (
	maxToken          = 256
	maxGuestVersion   = 128
	maxLandlockDetail = 512
)

// Encode encodes h as a FrameHello payload.
func (h Hello) Encode() []byte {
	var e encoder
	e.u16(h.Version)
	e.bytes(h.Token)
	e.bytes([]byte(h.GuestVersion))
	e.u32(h.Pid)
	l := h.Landlock
	var flags uint8
	if l.Enforced {
		flags |= landlockEnforced
	}
	e.u8(uint8(l.Mode))
	e.u8(uint8(min(max(l.ABI, 0), 255)))
	e.u8(flags)
	detail := l.Detail
	if len(detail) > maxLandlockDetail {
		detail = detail[:maxLandlockDetail]
	}
	e.bytes([]byte(detail))
	return e.b
}

// Landlock status flags on the wire.
const landlockEnforced = 1

// DecodeHello decodes a FrameHello payload.
func DecodeHello(p []byte) (Hello, error) {
	d := decoder{b: p}
	h := Hello{Version: d.u16()}
	h.Token = d.bytes(maxToken)
	h.GuestVersion = string(d.bytes(maxGuestVersion))
	h.Pid = d.u32()
	if d.err == nil && len(d.b) > 0 {
		mode := LandlockMode(d.u8())
		abi := d.u8()
		flags := d.u8()
		detail := string(d.bytes(maxLandlockDetail))
		if d.err == nil && (mode >= landlockModeEnd || flags&^landlockEnforced != 0) {
			d.fail("bad landlock status")
		}
		h.Landlock = LandlockStatus{Mode: mode, ABI: int(abi), Enforced: flags&landlockEnforced != 0, Detail: detail}
	}
	if err := d.finish("hello"); err != nil {
		return Hello{}, err
	}
	if !utf8.ValidString(h.GuestVersion) || !utf8.ValidString(h.Landlock.Detail) {
		return Hello{}, fmt.Errorf("%w: hello: guest version or landlock detail is not UTF-8", ErrProtocol)
	}
	return h, nil
}

// Request flags on the wire.
const reqFlagTTY = 1

// EncodeExecRequest encodes r as a FrameOpen payload.
func EncodeExecRequest(r *ExecRequest) []byte {
	var e encoder
	var flags uint8
	if r.TTY {
		flags |= reqFlagTTY
	}
	e.u8(flags)
	e.uvarint(uint64(r.Timeout))
	e.uvarint(uint64(r.KillGrace))
	e.uvarint(uint64(r.MaxOutputBytes))
	e.u16(r.Rows)
	e.u16(r.Cols)
	e.bytes([]byte(r.Dir))
	e.strings(r.Argv)
	e.strings(r.Env)
	return e.b
}

// DecodeExecRequest decodes a FrameOpen payload and validates the request.
func DecodeExecRequest(p []byte) (ExecRequest, error) {
	d := decoder{b: p}
	var r ExecRequest
	flags := d.u8()
	if flags&^reqFlagTTY != 0 {
		return ExecRequest{}, fmt.Errorf("%w: open: unknown flags %#x", ErrProtocol, flags)
	}
	r.TTY = flags&reqFlagTTY != 0
	r.Timeout = time.Duration(d.duration())
	r.KillGrace = time.Duration(d.duration())
	r.MaxOutputBytes = d.duration()
	r.Rows = d.u16()
	r.Cols = d.u16()
	r.Dir = string(d.bytes(MaxFrameSize))
	r.Argv = d.strings()
	r.Env = d.strings()
	if err := d.finish("open"); err != nil {
		return ExecRequest{}, err
	}
	if err := r.Validate(); err != nil {
		return ExecRequest{}, err
	}
	return r, nil
}

// Exit flags on the wire.
const (
	exitTimedOut = 1 << iota
	exitStdoutTruncated
	exitStderrTruncated
	exitCanceled
	exitFlagsAll = exitTimedOut | exitStdoutTruncated | exitStderrTruncated | exitCanceled
)

// EncodeExit encodes r as a FrameExit payload (Lost is not sent: it is
// what the daemon concludes when no FrameExit arrives). The resource usage
// travels after the fields of the first protocol version, and only when
// there is some: a daemon from before usage never sees it.
func EncodeExit(r ExecResult) []byte {
	size := exitPayloadSize
	if r.UserCPU != 0 || r.SysCPU != 0 || r.PeakMemBytes != 0 {
		size = exitUsageSize
	}
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:4], uint32(int32(r.ExitCode)))
	b[4] = uint8(r.Signal)
	var f uint8
	if r.TimedOut {
		f |= exitTimedOut
	}
	if r.StdoutTruncated {
		f |= exitStdoutTruncated
	}
	if r.StderrTruncated {
		f |= exitStderrTruncated
	}
	if r.Canceled {
		f |= exitCanceled
	}
	b[5] = f
	binary.BigEndian.PutUint64(b[6:14], uint64(r.StdoutBytes))
	binary.BigEndian.PutUint64(b[14:22], uint64(r.StderrBytes))
	binary.BigEndian.PutUint64(b[22:30], uint64(r.Duration))
	if size == exitUsageSize {
		binary.BigEndian.PutUint64(b[30:38], uint64(r.UserCPU))
		binary.BigEndian.PutUint64(b[38:46], uint64(r.SysCPU))
		binary.BigEndian.PutUint64(b[46:54], uint64(r.PeakMemBytes))
	}
	return b
}

// DecodeExit decodes a FrameExit payload, with or without resource usage.
func DecodeExit(p []byte) (ExecResult, error) {
	if len(p) != exitPayloadSize && len(p) != exitUsageSize {
		return ExecResult{}, fmt.Errorf("%w: exit of %d bytes", ErrProtocol, len(p))
	}
	f := p[5]
	if f&^exitFlagsAll != 0 {
		return ExecResult{}, fmt.Errorf("%w: exit: unknown flags %#x", ErrProtocol, f)
	}
	r := ExecResult{
		ExitCode:        int(int32(binary.BigEndian.Uint32(p[0:4]))),
		Signal:          int(p[4]),
		TimedOut:        f&exitTimedOut != 0,
		StdoutTruncated: f&exitStdoutTruncated != 0,
		StderrTruncated: f&exitStderrTruncated != 0,
		Canceled:        f&exitCanceled != 0,
		StdoutBytes:     int64(binary.BigEndian.Uint64(p[6:14])),
		StderrBytes:     int64(binary.BigEndian.Uint64(p[14:22])),
		Duration:        time.Duration(binary.BigEndian.Uint64(p[22:30])),
	}
	if len(p) == exitUsageSize {
		r.UserCPU = time.Duration(binary.BigEndian.Uint64(p[30:38]))
		r.SysCPU = time.Duration(binary.BigEndian.Uint64(p[38:46]))
		r.PeakMemBytes = int64(binary.BigEndian.Uint64(p[46:54]))
		if r.UserCPU == 0 && r.SysCPU == 0 && r.PeakMemBytes == 0 {
			// Not how a result without usage is sent.
			return ExecResult{}, fmt.Errorf("%w: exit: empty usage", ErrProtocol)
		}
	}
	if r.StdoutBytes < 0 || r.StderrBytes < 0 || r.Duration < 0 || r.UserCPU < 0 || r.SysCPU < 0 || r.PeakMemBytes < 0 {
		return ExecResult{}, fmt.Errorf("%w: exit: negative count", ErrProtocol)
	}
	return r, nil
}

// EncodeError encodes a FrameError payload; msg is cut to fit.
func EncodeError(kind ErrorKind, msg string) []byte {
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage]
	}
	return append([]byte{byte(kind)}, msg...)
}

// DecodeError decodes a FrameError payload.
func DecodeError(p []byte) (ErrorKind, string, error) {
	if len(p) < 1 || len(p) > 1+maxErrorMessage {
		return 0, "", fmt.Errorf("%w: error of %d bytes", ErrProtocol, len(p))
	}
	k := ErrorKind(p[0])
	if k < ErrKindProtocol || k > ErrKindInternal {
		return 0, "", fmt.Errorf("%w: unknown error kind %d", ErrProtocol, p[0])
	}
	return k, string(p[1:]), nil
}

// EncodeWindow encodes a FrameWindow payload.
func EncodeWindow(ch Channel, n uint32) []byte {
	b := make([]byte, 5)
	b[0] = byte(ch)
	binary.BigEndian.PutUint32(b[1:], n)
	return b
}

// DecodeWindow decodes a FrameWindow payload.
func DecodeWindow(p []byte) (Channel, uint32, error) {
	if len(p) != 5 || Channel(p[0]) >= numChannels {
		return 0, 0, fmt.Errorf("%w: bad window frame", ErrProtocol)
	}
	n := binary.BigEndian.Uint32(p[1:])
	if n == 0 || n > maxWindow {
		return 0, 0, fmt.Errorf("%w: window increment %d", ErrProtocol, n)
	}
	return Channel(p[0]), n, nil
}

// EncodeResize encodes a FrameResize payload.
func EncodeResize(rows, cols uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b[0:2], rows)
	binary.BigEndian.PutUint16(b[2:4], cols)
	return b
}

// DecodeResize decodes a FrameResize payload.
func DecodeResize(p []byte) (rows, cols uint16, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("%w: bad resize frame", ErrProtocol)
	}
	return binary.BigEndian.Uint16(p[0:2]), binary.BigEndian.Uint16(p[2:4]), nil
}

// DecodeSignal decodes the payload of a FrameSignal or FrameKill: a Linux
// signal number, 1..64.
func DecodeSignal(p []byte) (int, error) {
	if len(p) != 1 || p[0] == 0 || p[0] > 64 {
		return 0, fmt.Errorf("%w: bad signal frame", ErrProtocol)
	}
	return int(p[0]), nil
}

// EncodeU32 and DecodeU32 carry a FrameStarted pid.
func EncodeU32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// DecodeU32 decodes a 4-byte payload.
func DecodeU32(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: want 4 bytes, got %d", ErrProtocol, len(p))
	}
	return binary.BigEndian.Uint32(p), nil
}

// EncodePort encodes a FrameDial payload.
func EncodePort(port uint16) []byte { return binary.BigEndian.AppendUint16(nil, port) }

// DecodePort decodes a FrameDial payload: a port, never 0.
func DecodePort(p []byte) (uint16, error) {
	if len(p) != 2 {
		return 0, fmt.Errorf("%w: want 2 bytes, got %d", ErrProtocol, len(p))
	}
	port := binary.BigEndian.Uint16(p)
	if port == 0 {
		return 0, fmt.Errorf("%w: port 0", ErrInvalid)
	}
	return port, nil
}

// encoder builds payloads.
type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) uvarint(v uint64) {
	e.b = binary.AppendUvarint(e.b, v)
}
func (e *encoder) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.b = append(e.b, p...)
}
func (e *encoder) strings(ss []string) {
	e.uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.bytes([]byte(s))
	}
}

// decoder reads payloads. The first error sticks; later reads return zero
// values, so a decode function checks once, in finish.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrProtocol, what)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("payload too short")
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// duration reads a uvarint that must fit a non-negative int64.
func (d *decoder) duration() int64 {
	v := d.uvarint()
	if v > 1<<63-1 {
		d.fail("value out of range")
		return 0
	}
	return int64(v)
}

func (d *decoder) bytes(max int) []byte {
	n := d.uvarint()
	if n > uint64(max) {
		d.fail("field too long")
		return nil
	}
	return d.take(int(n))
}

func (d *decoder) strings() []string {
	n := d.uvarint()
	// Every entry takes at least one byte (its length), so a count larger
	// than what is left is a lie: refuse it before allocating.
	if n > uint64(len(d.b)) || n > maxArgs {
		d.fail("bad list length")
		return nil
	}
	ss := make([]string, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		ss = append(ss, string(d.bytes(MaxFrameSize)))
	}
	return ss
}

func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("%s: %w", what, d.err)
	}
	return nil
}
