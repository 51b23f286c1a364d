package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// FrameType says what a frame carries. The set is closed: a frame of any
// other type is a protocol violation and ends the connection.
type FrameType uint8

// The frame types. "d->g" frames are sent by the daemon, "g->d" by the guest.
const (
	// FrameHello (g->d, stream 0) opens a connection: version, token, guest info.
	FrameHello FrameType = 1 + iota
	// FrameHelloOK (d->g, stream 0) accepts the connection.
	FrameHelloOK
	// FrameOpen (d->g) starts a command on a new stream (an ExecRequest).
	FrameOpen
	// FrameStdin (d->g) is data for the command's standard input.
	FrameStdin
	// FrameStdinClose (d->g) closes the command's standard input.
	FrameStdinClose
	// FrameStdout (g->d) is data the command wrote to its standard output
	// (the terminal, for a TTY).
	FrameStdout
	// FrameStderr (g->d) is data the command wrote to its standard error.
	FrameStderr
	// FrameSignal (d->g) sends a signal to the command's process group.
	FrameSignal
	// FrameResize (d->g) resizes the command's terminal.
	FrameResize
	// FrameKill (d->g) sends a signal to every process of the command's tree;
	// SIGKILL ends the command.
	FrameKill
	// FrameStarted (g->d) says the command runs and carries its pid.
	FrameStarted
	// FrameExit (g->d) is the last frame of a stream that started: the result.
	FrameExit
	// FrameError (either way) fails a stream (a command that could not start)
	// or, on stream 0, the whole connection.
	FrameError
	// FramePing (either way, stream 0) asks for a FramePong with the same payload.
	FramePing
	// FramePong answers a FramePing.
	FramePong
	// FrameWindow (either way) grants the peer credit to send more data on
	// one channel of a stream.
	FrameWindow
	// FrameDial (d->g) opens a new stream that relays one TCP connection
	// to a port on the sandbox's loopback (a big-endian uint16): see Conn.
	// OpenPort for how the stream's frames carry it.
	FrameDial

	frameTypeEnd
)

const (
	// HeaderSize is the size of a frame header: payload length (uint32),
	// type (uint8), stream id (uint32), all big-endian.
	HeaderSize = 9
	// MaxFrameSize is the largest payload any frame may carry. Decoders
	// check it before allocating.
	MaxFrameSize = 1 << 20
	// maxErrorMessage bounds the text of a FrameError.
	maxErrorMessage = 4096
	// maxHello bounds a FrameHello: a token, a version string, a pid, a
	// Landlock status.
	maxHello = 2048
)

// exitPayloadSize is the size of a FrameExit payload without resource
// usage (see EncodeExit); exitUsageSize the size with it. A guest from
// before usage sends the first, and a result with no usage is sent that
// way too, so that each result has one encoding.
const (
	exitPayloadSize = 4 + 1 + 1 + 8 + 8 + 8
	exitUsageSize   = exitPayloadSize + 8 + 8 + 8
)

// frameRule is what a frame of one type may look like.
type frameRule struct {
	name     string
	min, max uint32 // payload length bounds
	stream   int8   // 0: must be stream 0, 1: must not be 0, -1: either
}

var frameRules = [frameTypeEnd]frameRule{
	FrameHello:      {"hello", 4, maxHello, 0},
	FrameHelloOK:    {"hello-ok", 2, 2, 0},
	FrameOpen:       {"open", 1, MaxFrameSize, 1},
	FrameStdin:      {"stdin", 1, MaxFrameSize, 1},
	FrameStdinClose: {"stdin-close", 0, 0, 1},
	FrameStdout:     {"stdout", 1, MaxFrameSize, 1},
	FrameStderr:     {"stderr", 1, MaxFrameSize, 1},
	FrameSignal:     {"signal", 1, 1, 1},
	FrameResize:     {"resize", 4, 4, 1},
	FrameKill:       {"kill", 1, 1, 1},
	FrameStarted:    {"started", 4, 4, 1},
	FrameExit:       {"exit", exitPayloadSize, exitUsageSize, 1},
	FrameError:      {"error", 1, 1 + maxErrorMessage, -1},
	FramePing:       {"ping", 8, 8, 0},
	FramePong:       {"pong", 8, 8, 0},
	FrameWindow:     {"window", 5, 5, 1},
	FrameDial:       {"dial", 2, 2, 1},
}

func (t FrameType) String() string {
	if t > 0 && t < frameTypeEnd {
		return frameRules[t].name
	}
	return fmt.Sprintf("frame-type-%d", uint8(t))
}

// ErrProtocol classifies every violation of the frame protocol: a peer that
// commits one is disconnected.
var ErrProtocol = errors.New("guest protocol violation")

// Frame is one decoded frame. Payload is owned by the frame.
type Frame struct {
	Type    FrameType
	Stream  uint32
	Payload []byte
}

// checkHeader validates a header before its payload is read or allocated.
func checkHeader(t FrameType, stream, n uint32) error {
	if t == 0 || t >= frameTypeEnd {
		return fmt.Errorf("%w: unknown frame type %d", ErrProtocol, uint8(t))
	}
	r := frameRules[t]
	if n > MaxFrameSize || n < r.min || n > r.max {
		return fmt.Errorf("%w: %s frame of %d bytes (allowed %d..%d)", ErrProtocol, r.name, n, r.min, r.max)
	}
	switch {
	case r.stream == 0 && stream != 0:
		return fmt.Errorf("%w: %s frame on stream %d, want stream 0", ErrProtocol, r.name, stream)
	case r.stream == 1 && stream == 0:
		return fmt.Errorf("%w: %s frame on stream 0", ErrProtocol, r.name)
	}
	return nil
}

// PutHeader writes a frame header for a payload of n bytes into b[:HeaderSize].
func PutHeader(b []byte, t FrameType, stream uint32, n int) {
	binary.BigEndian.PutUint32(b[0:4], uint32(n))
	b[4] = byte(t)
	binary.BigEndian.PutUint32(b[5:9], stream)
}

// AppendFrame appends one encoded frame to dst. It does not validate: the
// encoders of this package only build valid frames, and tests build invalid
// ones on purpose.
func AppendFrame(dst []byte, t FrameType, stream uint32, payload []byte) []byte {
	var h [HeaderSize]byte
	PutHeader(h[:], t, stream, len(payload))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// DecodeFrame decodes the first frame of b and returns it with the number
// of bytes it used. A b that holds only part of a valid frame gives
// io.ErrUnexpectedEOF; a frame that breaks the rules gives ErrProtocol. The
// payload is copied: b may be reused.
func DecodeFrame(b []byte) (Frame, int, error) {
	if len(b) < HeaderSize {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	n := binary.BigEndian.Uint32(b[0:4])
	t := FrameType(b[4])
	stream := binary.BigEndian.Uint32(b[5:9])
	if err := checkHeader(t, stream, n); err != nil {
		return Frame{}, 0, err
	}
	if uint64(len(b)-HeaderSize) < uint64(n) {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	end := HeaderSize + int(n)
	p := make([]byte, n)
	copy(p, b[HeaderSize:end])
	return Frame{Type: t, Stream: stream, Payload: p}, end, nil
}

// ReadFrame reads one frame from r. It returns io.EOF only when r ends
// cleanly between frames.
func ReadFrame(r io.Reader) (Frame, error) {
	return readFrame(r, false)
}

// readFrame is ReadFrame; with recycle, the payload of an output frame
// comes from outPayloads, for the reader to hand back with
// recycleOutput once it is written.
func readFrame(r io.Reader, recycle bool) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	t := FrameType(h[4])
	stream := binary.BigEndian.Uint32(h[5:9])
	if err := checkHeader(t, stream, n); err != nil {
		return Frame{}, err
	}
	var p []byte
	if recycle && (t == FrameStdout || t == FrameStderr) {
		p = outputPayload(int(n))
	} else {
		p = make([]byte, n)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: t, Stream: stream, Payload: p}, nil
}
