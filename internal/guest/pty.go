package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
)

// errSessionEnded is what a Write to a finished terminal session returns.
var errSessionEnded = errors.New("terminal session ended")

// PTYSession is a command running on a pseudo-terminal in the guest, for
// interactive shells. Read returns the terminal's output until io.EOF after
// the command ends; Write types into it.
type PTYSession struct {
	p    *Process
	outR *io.PipeReader
	inW  *io.PipeWriter
}

// PTY starts req on a new terminal (req.TTY is implied; Rows and Cols set
// its initial size) and returns once it runs.
func (c *Conn) PTY(ctx context.Context, req ExecRequest) (*PTYSession, error) {
	req.TTY = true
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	p, err := c.Start(ctx, req, inR, outW, nil)
	if err != nil {
		outW.Close()
		inR.Close()
		return nil, err
	}
	go func() {
		<-p.done
		inR.CloseWithError(errSessionEnded)
		<-p.out[0].finished
		<-p.out[1].finished
		outW.Close()
	}()
	return &PTYSession{p: p, outR: outR, inW: inW}, nil
}

// Read reads the terminal's output.
func (s *PTYSession) Read(b []byte) (int, error) { return s.outR.Read(b) }

// Write writes to the terminal's input.
func (s *PTYSession) Write(b []byte) (int, error) { return s.inW.Write(b) }

// Pid is the command's process id inside the sandbox.
func (s *PTYSession) Pid() int { return s.p.Pid() }

// Resize changes the terminal's size; the command gets SIGWINCH.
func (s *PTYSession) Resize(rows, cols uint16) error { return s.p.Resize(rows, cols) }

// Resize changes the terminal of a command started with TTY; the
// command's foreground process group gets SIGWINCH. A command that has
// ended is not an error: there is nothing left to resize.
func (p *Process) Resize(rows, cols uint16) error {
	if !p.req.TTY {
		return fmt.Errorf("%w: resizing %q, which runs without a terminal", ErrInvalid, p.argv0)
	}
	if rows == 0 || cols == 0 {
		return fmt.Errorf("%w: terminal size %dx%d", ErrInvalid, rows, cols)
	}
	return p.send(FrameResize, EncodeResize(rows, cols))
}

// Signal sends sig to the command's process group.
func (s *PTYSession) Signal(sig syscall.Signal) error { return s.p.Signal(sig) }

// Close kills the command's tree and stops reading its output.
func (s *PTYSession) Close() error {
	err := s.p.Kill()
	s.inW.Close()
	s.outR.Close()
	return err
}

// Wait waits for the command to end. Unlike Process.Wait it does not wait
// for the output to be read: what is left stays readable until io.EOF.
func (s *PTYSession) Wait(ctx context.Context) (ExecResult, error) {
	return s.p.wait(ctx, false)
}
