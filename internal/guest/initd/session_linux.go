package initd

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/agentbox/agentbox/internal/guest"
)

// maxStreams bounds the commands one connection may run at once.
const maxStreams = 1024

// session serves one connection to the daemon. Its read loop never blocks
// on a command: frames go to bounded per-stream queues or to goroutines.
type session struct {
	g    *Guest
	nc   net.Conn
	w    *guest.FrameWriter
	done chan struct{} // closed when the connection ends

	mu      sync.Mutex
	streams map[uint32]*execStream
	maxID   uint32
	wg      sync.WaitGroup
}

func newSession(g *Guest, nc net.Conn) *session {
	return &session{
		g:       g,
		nc:      nc,
		w:       guest.NewFrameWriter(nc, writeTimeout),
		done:    make(chan struct{}),
		streams: make(map[uint32]*execStream),
	}
}

// serve reads frames until the connection ends, then kills the
// connection's commands (nobody is left to read their results) and waits
// for them.
func (s *session) serve(ctx context.Context, br *bufio.Reader) error {
	stop := context.AfterFunc(ctx, func() { s.nc.Close() })
	defer stop()
	var err error
	for {
		var f guest.Frame
		f, err = guest.ReadFrame(br)
		if err != nil {
			break
		}
		if err = s.dispatch(f); err != nil {
			s.w.WriteFrame(guest.FrameError, 0, guest.EncodeError(guest.ErrKindProtocol, err.Error()))
			break
		}
	}
	close(s.done)
	s.nc.Close()
	s.mu.Lock()
	for _, st := range s.streams {
		st.closeInput()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *session) send(t guest.FrameType, id uint32, payload []byte) {
	if err := s.w.WriteFrame(t, id, payload); err != nil {
		s.g.log.Debug("writing to the daemon", "error", err)
		s.nc.Close()
	}
}

// stream finds the stream a frame is for. A frame for a stream that ended
// is dropped (stdin can cross the command's exit); one for a stream that
// never existed is a violation.
func (s *session) stream(id uint32) (*execStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil && id > s.maxID {
		return nil, fmt.Errorf("%w: frame for stream %d that was never opened", guest.ErrProtocol, id)
	}
	return st, nil
}

func (s *session) remove(id uint32) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

func (s *session) dispatch(f guest.Frame) error {
	switch f.Type {
	case guest.FramePing:
		return s.w.WriteFrame(guest.FramePong, 0, f.Payload)
	case guest.FramePong:
		return nil
	case guest.FrameOpen, guest.FrameDial:
		return s.open(f)
	case guest.FrameError:
		_, msg, _ := guest.DecodeError(f.Payload)
		return fmt.Errorf("daemon reported: %s", msg)
	case guest.FrameStdin, guest.FrameStdinClose, guest.FrameSignal, guest.FrameKill, guest.FrameResize, guest.FrameWindow:
	default:
		return fmt.Errorf("%w: unexpected %s frame from the daemon", guest.ErrProtocol, f.Type)
	}
	st, err := s.stream(f.Stream)
	if st == nil || err != nil {
		return err
	}
	switch f.Type {
	case guest.FrameStdin:
		return st.stdin.push(f.Payload)
	case guest.FrameStdinClose:
		st.stdin.closeInput()
	case guest.FrameSignal:
		sig, err := guest.DecodeSignal(f.Payload)
		if err != nil {
			return err
		}
		st.request(ctlCmd{kind: guest.FrameSignal, sig: sig})
	case guest.FrameKill:
		sig, err := guest.DecodeSignal(f.Payload)
		if err != nil {
			return err
		}
		st.request(ctlCmd{kind: guest.FrameKill, sig: sig})
	case guest.FrameResize:
		rows, cols, err := guest.DecodeResize(f.Payload)
		if err != nil {
			return err
		}
		st.resize(rows, cols)
	case guest.FrameWindow:
		ch, n, err := guest.DecodeWindow(f.Payload)
		if err != nil {
			return err
		}
		if ch != guest.ChanStdout && ch != guest.ChanStderr {
			return fmt.Errorf("%w: window for %d from the daemon", guest.ErrProtocol, ch)
		}
		if !st.credit[ch-guest.ChanStdout].Add(int(n)) {
			return fmt.Errorf("%w: window overflow on stream %d", guest.ErrProtocol, f.Stream)
		}
	}
	return nil
}

// open registers a new stream here, in the read loop, so that the frames
// that follow it find it, and runs the command (or relays the connection,
// for FrameDial) elsewhere.
func (s *session) open(f guest.Frame) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Stream <= s.maxID {
		return fmt.Errorf("%w: stream id %d reused", guest.ErrProtocol, f.Stream)
	}
	s.maxID = f.Stream
	var req guest.ExecRequest
	var port uint16
	var err error
	if f.Type == guest.FrameDial {
		port, err = guest.DecodePort(f.Payload)
	} else {
		req, err = guest.DecodeExecRequest(f.Payload)
	}
	if err != nil {
		go s.send(guest.FrameError, f.Stream, guest.EncodeError(guest.ErrKindInvalid, err.Error()))
		return nil
	}
	if len(s.streams) >= maxStreams {
		go s.send(guest.FrameError, f.Stream, guest.EncodeError(guest.ErrKindLimit, fmt.Sprintf("more than %d commands and connections at once", maxStreams)))
		return nil
	}
	st := newExecStream(s, f.Stream, req)
	st.port = port
	s.streams[f.Stream] = st
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.remove(st.id)
		st.run()
	}()
	return nil
}
