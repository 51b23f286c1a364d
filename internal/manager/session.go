package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// sessionCloseWait bounds how long Close waits for the guest to report a
// killed session before it records the session as the guest reported it
// (or lost).
const sessionCloseWait = 15 * time.Second

// Session is an interactive command on a pseudo-terminal in a sandbox. Read
// returns the terminal's output until io.EOF after the command ends; Write
// types into it. It is recorded as an exec, finished once by Wait or Close.
type Session struct {
	// ExecID is the session's exec record.
	ExecID string
	// SandboxID is the sandbox it runs in.
	SandboxID string
	// Replaced says the workspace's sandbox was gone and a new one was
	// started for this session.
	Replaced bool

	m   *Manager
	lv  *live
	pty *guest.PTYSession
	sb  store.Sandbox
	rec store.Exec

	once sync.Once
	out  ExecOutcome
	err  error
}

// OpenSession starts req on a new terminal in the sandbox of target (a
// workspace or sandbox ID), replacing a sandbox that is gone as Exec does.
// req.Rows and req.Cols set the terminal's first size (0: 24x80). The
// caller must Close the session.
func (m *Manager) OpenSession(ctx context.Context, target string, req guest.ExecRequest) (*Session, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, errdefs.Invalid("session: the command is empty")
	}
	wsID, err := m.targetWorkspace(ctx, target)
	if err != nil {
		return nil, err
	}
	sb, lv, replaced, err := m.ensureSandbox(ctx, wsID)
	if err != nil {
		return nil, err
	}
	// The session holds its claim on the sandbox until it ends.
	handedOver := false
	defer func() {
		if !handedOver {
			lv.done()
		}
	}()
	rec, err := m.beginExec(ctx, sb, lv.task, req.Argv)
	if err != nil {
		return nil, err
	}
	ctx = logx.With(ctx, KeyWorkspace, wsID, KeySandbox, sb.ID, KeyExec, rec.ID)
	req.TTY = true
	req = execRequest(lv.spec, req, lv.placeholders, lv.imageEnv)
	pty, err := lv.conn.PTY(ctx, req)
	if err != nil {
		res := guest.ExecResult{ExitCode: -1, Lost: errors.Is(err, guest.ErrClosed)}
		var se *guest.StartError
		if errors.As(err, &se) {
			res.ExitCode = se.ExitCode()
		}
		m.endExec(context.WithoutCancel(ctx), sb, rec, res, err)
		if errors.Is(err, guest.ErrInvalid) {
			return nil, errdefs.Invalid("session in sandbox %s: %v", sb.ID, err)
		}
		return nil, fmt.Errorf("session in sandbox %s: %w", sb.ID, err)
	}
	m.log.InfoContext(ctx, "session started", KeySandbox, sb.ID, KeyWorkspace, wsID, "exec_id", rec.ID)
	handedOver = true
	return &Session{ExecID: rec.ID, SandboxID: sb.ID, Replaced: replaced, m: m, pty: pty, sb: sb, rec: rec, lv: lv}, nil
}

// Read reads the terminal's output.
func (s *Session) Read(b []byte) (int, error) { return s.pty.Read(b) }

// Write types b into the terminal.
func (s *Session) Write(b []byte) (int, error) { return s.pty.Write(b) }

// Resize changes the terminal's size; the command gets SIGWINCH.
func (s *Session) Resize(rows, cols uint16) error {
	if err := s.pty.Resize(rows, cols); err != nil {
		if errors.Is(err, guest.ErrInvalid) {
			return errdefs.Invalid("terminal size %dx%d: rows and columns must be positive", rows, cols)
		}
		return err
	}
	return nil
}

// Wait waits for the command to end and records the exec. When ctx ends
// first, the command's tree is killed and the outcome says Canceled. Output
// still unread stays readable until io.EOF.
func (s *Session) Wait(ctx context.Context) (ExecOutcome, error) {
	res, err := s.pty.Wait(ctx)
	s.finish(res, err)
	return s.out, s.err
}

// Close kills the command's whole tree if it still runs, stops its output,
// and records the exec once the guest reports the end.
func (s *Session) Close() error {
	err := s.pty.Close()
	ctx, cancel := context.WithTimeout(context.Background(), sessionCloseWait)
	defer cancel()
	s.Wait(ctx)
	return err
}

func (s *Session) finish(res guest.ExecResult, err error) {
	s.once.Do(func() {
		defer s.lv.done()
		s.out = ExecOutcome{ExecResult: res, ExecID: s.ExecID, SandboxID: s.SandboxID, Replaced: s.Replaced}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			// The caller ended the wait on purpose: the command was killed
			// and res says so; that is an outcome, not a failure.
			err = nil
		}
		ctx := logx.With(context.Background(), KeyWorkspace, s.sb.WorkspaceID, KeySandbox, s.SandboxID, KeyExec, s.ExecID)
		s.m.endExec(ctx, s.sb, s.rec, res, err)
		if err != nil {
			s.err = fmt.Errorf("session in sandbox %s: %w", s.SandboxID, err)
		}
	})
}

// beginExec records a command about to run in sb, whose workspace has
// the task label task.
func (m *Manager) beginExec(ctx context.Context, sb store.Sandbox, task string, argv []string) (store.Exec, error) {
	b, _ := json.Marshal(argv)
	rec := store.Exec{ID: ids.New("ex"), SandboxID: sb.ID, WorkspaceID: sb.WorkspaceID, Task: task, Argv: string(b), State: store.ExecRunning, StartedAt: time.Now().UTC()}
	return rec, m.st.CreateExec(ctx, rec)
}

// endExec records how a command ended (err is what running it returned)
// and the sandbox's activity; a lost command marks its sandbox lost. It
// returns the record as written.
func (m *Manager) endExec(ctx context.Context, sb store.Sandbox, rec store.Exec, res guest.ExecResult, err error) store.Exec {
	rec.ExitCode, rec.Signal, rec.TimedOut = res.ExitCode, res.Signal, res.TimedOut
	rec.StdoutBytes, rec.StderrBytes, rec.FinishedAt = res.StdoutBytes, res.StderrBytes, time.Now().UTC()
	rec.CPUNanos, rec.PeakMemBytes, rec.WallNanos = int64(res.CPU()), res.PeakMemBytes, int64(res.Duration)
	if rec.WallNanos == 0 {
		rec.WallNanos = int64(rec.FinishedAt.Sub(rec.StartedAt))
	}
	switch {
	case err != nil:
		rec.State = store.ExecKilled
	case res.Lost:
		rec.State = store.ExecLost
	case res.TimedOut:
		rec.State = store.ExecTimedOut
	case res.Canceled:
		rec.State = store.ExecKilled
	default:
		rec.State = store.ExecExited
	}
	// Also the sandbox's last activity, and nothing else of it: sb is the
	// row as it was when the command started, and writing it back would
	// undo a stop or a loss recorded while the command ran.
	// The exec's end and its event are one commit.
	if _, ferr := m.st.FinishExecEvent(ctx, rec, execEvent(ctx, rec, err)); ferr != nil {
		m.log.WarnContext(ctx, "recording an exec's end", KeySandbox, sb.ID, "exec_id", rec.ID, "err", ferr)
	}
	m.log.InfoContext(ctx, "exec finished", KeyWorkspace, rec.WorkspaceID, KeySandbox, rec.SandboxID, KeyExec, rec.ID,
		"state", rec.State, "exit_code", rec.ExitCode, "cpu", time.Duration(rec.CPUNanos), "peak_mem_bytes", rec.PeakMemBytes,
		"wall", time.Duration(rec.WallNanos))
	if res.Lost {
		// Only a sandbox still running was lost: one stopped or removed
		// while the command ran ended the command, not the other way.
		l := m.lock("sb:" + sb.WorkspaceID)
		l.Lock()
		defer l.Unlock()
		if cur, err := m.st.GetSandbox(ctx, sb.ID); err == nil && cur.State == string(sandbox.StateRunning) {
			m.markLost(ctx, cur, "connection to the guest lost during exec "+rec.ID)
		}
	}
	return rec
}
