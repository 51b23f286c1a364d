package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Shell is an interactive command to run on a terminal.
type Shell struct {
	// Argv is the command; empty means /bin/sh.
	Argv []string
	// Env is the command's whole environment as KEY=VALUE entries (TERM
	// included: nothing is inherited).
	Env []string
	// Workdir defaults to /workspace.
	Workdir string
	// Rows and Cols are the terminal's first size; 0 means 24x80.
	Rows, Cols uint16
}

// ShellExit is how a shell session's command ended.
type ShellExit struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	// ExitCode is the command's status, 128+N when signal N killed it, -1
	// when unknown (Lost).
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal,omitempty"`
	Canceled bool `json:"canceled,omitempty"`
	// Lost says the sandbox died during the session.
	Lost       bool  `json:"lost,omitempty"`
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Message reports a failure the daemon met while ending the session.
	Message string `json:"message,omitempty"`
}

// ShellSession is a command running on a terminal in a sandbox, connected
// over a WebSocket. Read returns the terminal's output until io.EOF after the
// command ends; Write types into the terminal. Output must be read (to
// io.EOF) for Wait to return.
type ShellSession struct {
	// ExecID is the session's exec record; SandboxID the sandbox it runs
	// in; Replaced says that sandbox was started for it because the
	// workspace's one was gone.
	ExecID    string
	SandboxID string
	Replaced  bool

	ws     *websocket.Conn
	ctx    context.Context // ends when the session is closed
	cancel context.CancelFunc
	pr     *io.PipeReader
	done   chan struct{} // the read loop ended

	mu      sync.Mutex
	exit    *ShellExit
	errMsgs []string
	readErr error
}

// shellControl is a text message of the shell WebSocket.
type shellControl = apitypes.ShellControl

// ErrShellClosed is what Read, Write and Resize return after Close.
var ErrShellClosed = errors.New("shell session closed")

// Shell starts an interactive command on a terminal in target (a workspace
// or sandbox ID; a workspace without a running sandbox gets one). ctx
// bounds the start only; the session lasts until its command ends or
// Close. The caller must Close the session.
func (c *Client) Shell(ctx context.Context, target string, opts Shell) (*ShellSession, error) {
	q := url.Values{}
	for _, a := range opts.Argv {
		q.Add("argv", a)
	}
	for _, e := range opts.Env {
		q.Add("env", e)
	}
	if opts.Workdir != "" {
		q.Set("workdir", opts.Workdir)
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(int(opts.Rows)))
	}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(int(opts.Cols)))
	}
	u := c.base + execPath(target, "shell")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("opening a shell in %s: %w", target, err)
	}
	ws.SetReadLimit(1 << 20)
	// The first message says where the session runs.
	typ, b, err := ws.Read(ctx)
	var started shellControl
	if err == nil && typ == websocket.MessageText {
		err = json.Unmarshal(b, &started)
	}
	if err != nil || typ != websocket.MessageText || started.Type != "started" {
		ws.CloseNow()
		return nil, fmt.Errorf("opening a shell in %s: the daemon did not start the session (%v)", target, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	s := &ShellSession{ExecID: started.ExecID, SandboxID: started.SandboxID, Replaced: started.Replaced,
		ws: ws, ctx: sctx, cancel: cancel, pr: pr, done: make(chan struct{})}
	go s.readLoop(pw)
	return s, nil
}

// readLoop sorts the daemon's messages: terminal output to the pipe that
// Read reads, control messages to the session's state.
func (s *ShellSession) readLoop(pw *io.PipeWriter) {
	defer close(s.done)
	for {
		typ, b, err := s.ws.Read(s.ctx)
		if err != nil {
			s.mu.Lock()
			if s.exit == nil {
				s.readErr = err
			}
			s.mu.Unlock()
			pw.CloseWithError(io.EOF)
			return
		}
		if typ == websocket.MessageBinary {
			// After Close the write fails: the output is dropped while
			// the loop waits for the exit status.
			pw.Write(b)
			continue
		}
		var ctl shellControl
		if json.Unmarshal(b, &ctl) != nil {
			continue
		}
		switch ctl.Type {
		case "exit":
			ex := ShellExit{ExecID: ctl.ExecID, SandboxID: ctl.SandboxID, ExitCode: -1, Signal: ctl.Signal,
				Canceled: ctl.Canceled, Lost: ctl.Lost, DurationMS: ctl.DurationMS, Message: ctl.Message}
			if ctl.ExitCode != nil {
				ex.ExitCode = *ctl.ExitCode
			}
			s.mu.Lock()
			s.exit = &ex
			s.mu.Unlock()
			pw.Close()
		case "error":
			s.mu.Lock()
			s.errMsgs = append(s.errMsgs, ctl.Message)
			s.mu.Unlock()
		}
	}
}

// Read reads the terminal's output; io.EOF once the command has ended.
func (s *ShellSession) Read(b []byte) (int, error) { return s.pr.Read(b) }

// Write types b into the terminal.
func (s *ShellSession) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), 32<<10)]
		if err := s.ws.Write(s.ctx, websocket.MessageBinary, chunk); err != nil {
			return n, s.wrap(err)
		}
		n += len(chunk)
		b = b[len(chunk):]
	}
	return n, nil
}

// Resize changes the terminal's size; the command gets SIGWINCH.
func (s *ShellSession) Resize(rows, cols uint16) error {
	if rows == 0 || cols == 0 {
		return fmt.Errorf("terminal size %dx%d: %w", rows, cols, ErrInvalid)
	}
	b, _ := json.Marshal(shellControl{Type: "resize", Rows: rows, Cols: cols})
	return s.wrap(s.ws.Write(s.ctx, websocket.MessageText, b))
}

func (s *ShellSession) wrap(err error) error {
	if err == nil {
		return nil
	}
	if s.ctx.Err() != nil {
		return ErrShellClosed
	}
	return fmt.Errorf("shell %s: %w", s.ExecID, err)
}

// Wait waits for the command to end (its output read to io.EOF) and says
// how it ended. An error means the connection ended without an exit status.
func (s *ShellSession) Wait(ctx context.Context) (ShellExit, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return ShellExit{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exit != nil {
		return *s.exit, nil
	}
	return ShellExit{}, fmt.Errorf("shell %s: the connection ended without an exit status: %v", s.ExecID, s.readErr)
}

// Errors are the daemon's replies to control messages it refused.
func (s *ShellSession) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errMsgs...)
}

// Close ends the session: a command still running is killed with its
// whole process tree.
func (s *ShellSession) Close() error {
	s.pr.CloseWithError(ErrShellClosed)
	// The close handshake is bounded by the library; its error (the
	// daemon closed first) says nothing the caller can act on.
	s.ws.Close(websocket.StatusNormalClosure, "")
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.ws.CloseNow()
		<-s.done
	}
	return nil
}
