package manager

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/logx"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
)

// Background processes. A process is an exec that its request does not
// wait for: the daemon holds the guest's stream and drains the command's
// stdout and stderr into a ring per stream (ring.go) as fast as the guest
// sends them, so the command never waits on a reader, and readers take
// what they want from an offset. The rings live in the daemon's memory
// and nowhere else: a daemon that restarts loses them, and its sandboxes
// (marked lost at start, so the commands in them are gone) with them; the
// process's exec record then says lost. A process ends with its sandbox
// (stopped, removed, evicted at the end of its lifetime, or dead): its
// state is lost and its reason names the sandbox. Each process holds its
// sandbox's claim (like a command running) while it runs, so the idle
// timer does not stop a sandbox that runs one; the sandbox's lifetime
// still does.
const (
	// ProcessRingBytes is how much of each of a process's stdout and
	// stderr the daemon keeps: the last 1 MiB.
	ProcessRingBytes = 1 << 20
	// MaxProcessesRunning bounds the processes running at once in one
	// workspace, and maxProcessesKept the ended ones whose output is kept
	// (the oldest ended one is forgotten first). Together they bound the
	// daemon's memory per workspace at about 2*(32+16) MiB.
	MaxProcessesRunning = 32
	maxProcessesKept    = 16
	// processStdinBytes bounds the input queued in the daemon for one
	// process; MaxStdinWrite one write's data.
	processStdinBytes = 64 << 10
	MaxStdinWrite     = 1 << 20
	// stdinWait is how long a write of input waits for a command that
	// does not read it before it gives up with what was queued.
	stdinWait = 10 * time.Second
	// defaultProcessWait and maxProcessWait bound WaitProcess.
	defaultProcessWait = 30 * time.Second
	maxProcessWait     = 10 * time.Minute
	// MaxLogRead bounds one read of a process's logs (the whole ring).
	MaxLogRead = ProcessRingBytes
)

// process is a background process this daemon holds.
type process struct {
	id, workspaceID, sandboxID string
	argv                       []string
	replaced                   bool
	started                    time.Time
	gp                         *guest.Process
	out                        [2]*ring // stdout, stderr
	stdin                      *stdinQueue
	done                       chan struct{}
	// resizeMu orders resizes, so that the terminal ends at the size the
	// view shows.
	resizeMu sync.Mutex

	mu       sync.Mutex
	state    string
	exitCode int
	signal   int
	oom      bool
	reason   string
	finished time.Time
	// signaled is the last signal sent through the API: a command that
	// it ends was killed, not lost.
	signaled int
	// tty says the command runs on a terminal, of cols by rows as last
	// set.
	tty        bool
	cols, rows int
}

// procTable holds the processes of this daemon by workspace.
type procTable struct {
	mu    sync.Mutex
	byID  map[string]*process
	order map[string][]*process // per workspace, oldest first
	// supervisors counts the processes whose end is not recorded yet:
	// Shutdown waits for them, so that no exec record of this daemon's
	// stays running.
	supervisors sync.WaitGroup
}

func (t *procTable) init() {
	if t.byID == nil {
		t.byID = map[string]*process{}
		t.order = map[string][]*process{}
	}
}

// view is the API's picture of p now.
func (p *process) view() apitypes.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := apitypes.Process{
		ID: p.id, WorkspaceID: p.workspaceID, SandboxID: p.sandboxID, Replaced: p.replaced,
		Argv: p.argv, Pid: p.gp.Pid(), State: p.state, ExitCode: p.exitCode, Signal: p.signal, OOM: p.oom,
		Reason: p.reason, StartedAt: p.started,
		StdoutBytes: p.out[0].written(), StderrBytes: p.out[1].written(), RingBytes: ProcessRingBytes,
		StdinClosed: p.stdin.isClosed(),
		TTY:         p.tty, Cols: p.cols, Rows: p.rows,
	}
	if !p.finished.IsZero() {
		f := p.finished
		v.FinishedAt = &f
	}
	return v
}

// StartProcess starts req in the sandbox of target (a workspace or sandbox
// ID), starting or replacing the sandbox as Exec does, and returns once
// the command runs. The command has no output cap of its own (the rings
// bound what is kept) unless the request or the sandbox's policy sets
// one; req.Stdin, when set, is its first input (at most MaxStdinWrite),
// and more can be written until it is closed.
func (m *Manager) StartProcess(ctx context.Context, target string, req apitypes.ExecRequest) (apitypes.Process, error) {
	if len(req.Stdin) > MaxStdinWrite {
		return apitypes.Process{}, errdefs.Invalid("process: stdin over %d bytes (write the rest later)", MaxStdinWrite)
	}
	greq, err := Command(req)
	if err != nil {
		return apitypes.Process{}, err
	}
	if greq.MaxOutputBytes == 0 {
		greq.MaxOutputBytes = math.MaxInt64
	}
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return apitypes.Process{}, err
	}
	if n := m.runningProcesses(wsID); n >= MaxProcessesRunning {
		return apitypes.Process{}, fmt.Errorf("workspace %s already runs %d background processes, the most it may: %w", wsID, n, errdefs.ErrConflict)
	}
	p, err := m.startProcess(ctx, wsID, greq, []byte(req.Stdin))
	if errors.Is(err, guest.ErrNotSent) {
		// As Exec: the sandbox died before the command reached it.
		p, err = m.startProcess(ctx, wsID, greq, []byte(req.Stdin))
		if p != nil {
			p.replaced = true
		}
	}
	if err != nil {
		return apitypes.Process{}, err
	}
	return p.view(), nil
}

func (m *Manager) startProcess(ctx context.Context, wsID string, req guest.ExecRequest, stdin []byte) (*process, error) {
	sb, lv, replaced, err := m.ensureSandbox(ctx, wsID)
	if err != nil {
		return nil, err
	}
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
	bg := logx.With(context.WithoutCancel(ctx), KeyWorkspace, wsID, KeySandbox, sb.ID, KeyExec, rec.ID)
	req = execRequest(lv.spec, req, lv.placeholders, lv.imageEnv)
	p := &process{
		id: rec.ID, workspaceID: wsID, sandboxID: sb.ID, argv: req.Argv, replaced: replaced, started: rec.StartedAt,
		out:   [2]*ring{newRing(ProcessRingBytes), newRing(ProcessRingBytes)},
		stdin: newStdinQueue(processStdinBytes, stdin),
		done:  make(chan struct{}),
		state: store.ExecRunning, exitCode: -1,
		tty: req.TTY, cols: int(req.Cols), rows: int(req.Rows),
	}
	oom := m.watchOOM(bg, sb)
	gp, err := lv.conn.Start(ctx, req, p.stdin, p.out[0], p.out[1])
	if err != nil {
		res := guest.ExecResult{ExitCode: -1, Lost: errors.Is(err, guest.ErrClosed)}
		var se *guest.StartError
		if errors.As(err, &se) {
			res.ExitCode = se.ExitCode()
		}
		m.endExec(bg, sb, rec, res, err)
		switch {
		case se != nil, errors.Is(err, guest.ErrInvalid):
			return nil, fmt.Errorf("process in sandbox %s: %w: %w", sb.ID, err, errdefs.ErrInvalid)
		}
		return nil, fmt.Errorf("process in sandbox %s: %w", sb.ID, err)
	}
	p.gp = gp
	m.procs.mu.Lock()
	m.procs.init()
	m.procs.byID[p.id] = p
	m.procs.order[wsID] = append(m.procs.order[wsID], p)
	m.procs.mu.Unlock()
	m.event(bg, store.Event{Type: "process.started", WorkspaceID: wsID, SandboxID: sb.ID},
		map[string]any{"exec_id": rec.ID, "argv": req.Argv, "pid": gp.Pid()})
	m.log.InfoContext(bg, "process started", KeySandbox, sb.ID, KeyWorkspace, wsID, KeyExec, rec.ID)
	handedOver = true
	m.procs.supervisors.Add(1)
	go m.superviseProcess(bg, p, sb, rec, lv, oom)
	return p, nil
}

// superviseProcess waits for p to end, records it as an exec, releases
// the sandbox's claim and forgets the oldest ended processes.
func (m *Manager) superviseProcess(ctx context.Context, p *process, sb store.Sandbox, rec store.Exec, lv *live, oom oomWatch) {
	defer m.procs.supervisors.Done()
	start := time.Now()
	res, err := p.gp.Wait(context.Background())
	p.stdin.kill()
	lv.done()
	oomKilled := m.oomKilled(ctx, oom, sb, rec.ID, res)
	if o := m.cfg.Observer; o != nil {
		o.ObserveExec(sb.Backend, time.Since(start), outcomeOf(res, oomKilled, err))
	}
	rec.OOM = oomKilled
	m.endExec(ctx, sb, rec, res, err)

	p.mu.Lock()
	signaled := p.signaled
	p.mu.Unlock()
	state, reason := store.ExecExited, ""
	switch {
	case res.Lost:
		state, reason = store.ExecLost, m.sandboxEnd(ctx, sb.ID)
	case res.TimedOut:
		state = store.ExecTimedOut
	case err != nil, res.Canceled, res.Signal != 0:
		state = store.ExecKilled
		if signaled != 0 && res.Signal == signaled {
			reason = fmt.Sprintf("signal %d sent through the API", signaled)
		}
	}
	if oomKilled {
		reason = "out of memory"
	}
	p.mu.Lock()
	p.state, p.exitCode, p.signal, p.oom, p.reason, p.finished = state, res.ExitCode, res.Signal, oomKilled, reason, time.Now().UTC()
	if res.Lost || res.Signal != 0 {
		p.exitCode = -1
	}
	p.mu.Unlock()
	for _, r := range p.out {
		r.close()
	}
	close(p.done)
	m.log.InfoContext(ctx, "process ended", KeySandbox, sb.ID, KeyExec, p.id, "state", state, "reason", reason)
	m.trimProcesses(p.workspaceID)
}

// sandboxEnd says what became of sandbox id, for a process it ended.
func (m *Manager) sandboxEnd(ctx context.Context, id string) string {
	sb, err := m.st.GetSandbox(ctx, id)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return "its sandbox " + id + " was removed"
	case err != nil:
		return "its sandbox " + id + " ended"
	case sb.State == string(sandbox.StateStopped):
		return "its sandbox " + id + " was stopped"
	case sb.State == string(sandbox.StateLost):
		return "its sandbox " + id + " was lost (it died, or the guest's connection broke)"
	}
	return "the connection to its sandbox " + id + " broke"
}

// trimProcesses forgets the oldest ended processes of a workspace past
// maxProcessesKept.
func (m *Manager) trimProcesses(wsID string) {
	m.procs.mu.Lock()
	defer m.procs.mu.Unlock()
	list := m.procs.order[wsID]
	ended := 0
	for _, p := range list {
		if p.ended() {
			ended++
		}
	}
	keep := list[:0]
	for _, p := range list {
		if ended > maxProcessesKept && p.ended() {
			ended--
			delete(m.procs.byID, p.id)
			continue
		}
		keep = append(keep, p)
	}
	clear(list[len(keep):])
	if len(keep) == 0 {
		delete(m.procs.order, wsID)
	} else {
		m.procs.order[wsID] = keep
	}
}

// forgetProcesses drops every process of a removed workspace; each has
// ended with the workspace's sandboxes.
func (m *Manager) forgetProcesses(wsID string) {
	m.procs.mu.Lock()
	defer m.procs.mu.Unlock()
	for _, p := range m.procs.order[wsID] {
		delete(m.procs.byID, p.id)
	}
	delete(m.procs.order, wsID)
}

func (p *process) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (m *Manager) runningProcesses(wsID string) int {
	m.procs.mu.Lock()
	defer m.procs.mu.Unlock()
	n := 0
	for _, p := range m.procs.order[wsID] {
		if !p.ended() {
			n++
		}
	}
	return n
}

// process finds process id of target's workspace. An ID this daemon does
// not hold is ErrNotFound, saying why when it names an exec: output is
// kept in the daemon's memory only.
func (m *Manager) process(ctx context.Context, target, id string) (*process, error) {
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return nil, err
	}
	m.procs.mu.Lock()
	p := m.procs.byID[id]
	m.procs.mu.Unlock()
	if p != nil && p.workspaceID == wsID {
		return p, nil
	}
	if strings.TrimSpace(id) != "" {
		if x, err := m.st.GetExec(ctx, id); err == nil && x.WorkspaceID == wsID {
			return nil, fmt.Errorf("process %s of workspace %s %w: this daemon holds no output of it (it ended before the daemon's last start, or was forgotten among more than %d ended processes); its exec record says %s",
				id, wsID, errdefs.ErrNotFound, maxProcessesKept, x.State)
		}
	}
	return nil, fmt.Errorf("process %q of workspace %s %w", id, wsID, errdefs.ErrNotFound)
}

// ListProcesses lists the background processes of target's workspace
// that this daemon holds, running and recently ended, newest first.
func (m *Manager) ListProcesses(ctx context.Context, target string) ([]apitypes.Process, error) {
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return nil, err
	}
	m.procs.mu.Lock()
	list := slices.Clone(m.procs.order[wsID])
	m.procs.mu.Unlock()
	out := make([]apitypes.Process, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		out = append(out, list[i].view())
	}
	return out, nil
}

// GetProcess shows one process.
func (m *Manager) GetProcess(ctx context.Context, target, id string) (apitypes.Process, error) {
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.Process{}, err
	}
	return p.view(), nil
}

// LogQuery selects what a read of a process's logs returns.
type LogQuery = apitypes.LogQuery

func checkLogQuery(q LogQuery) (int, int, error) {
	i := 0
	switch q.Stream {
	case "", "stdout":
	case "stderr":
		i = 1
	default:
		return 0, 0, errdefs.Invalid("logs: stream %q is not stdout or stderr", q.Stream)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return 0, 0, errdefs.Invalid("logs: limit %d is negative", limit)
	case limit == 0 || limit > MaxLogRead:
		limit = MaxLogRead
	}
	return i, limit, nil
}

func streamName(i int) string { return [2]string{"stdout", "stderr"}[i] }

// chunk is a slice of ring i read from off, as the API shows it.
func chunk(i int, asked int64, data []byte, start int64) apitypes.ProcessLogs {
	l := apitypes.ProcessLogs{Stream: streamName(i), Offset: start, NextOffset: start + int64(len(data))}
	if asked >= 0 && start > asked {
		l.Dropped = start - asked
	}
	l.Data, l.DataB64 = textOf(data)
	return l
}

// ProcessLogs reads one output stream of a process from an offset, as
// far as the ring still holds it: bytes older than the ring's oldest are
// gone, and the reply starts at the oldest kept and says how many were
// dropped.
func (m *Manager) ProcessLogs(ctx context.Context, target, id string, q LogQuery) (apitypes.ProcessLogs, error) {
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.ProcessLogs{}, err
	}
	i, limit, err := checkLogQuery(q)
	if err != nil {
		return apitypes.ProcessLogs{}, err
	}
	data, start, _ := p.out[i].read(q.Offset, limit)
	l := chunk(i, q.Offset, data, start)
	v := p.view()
	l.Process = &v
	return l, nil
}

// FollowProcessLogs sends one output stream of a process from an offset
// to fn as it is written, until the process has ended and everything was
// sent (the last call carries the ended process and no data), fn fails
// or ctx ends. A follower that falls more than the ring behind skips what
// fell out, and the next chunk says how much.
func (m *Manager) FollowProcessLogs(ctx context.Context, target, id string, q LogQuery, fn func(apitypes.ProcessLogs) error) error {
	p, err := m.process(ctx, target, id)
	if err != nil {
		return err
	}
	i, limit, err := checkLogQuery(q)
	if err != nil {
		return err
	}
	r := p.out[i]
	off := q.Offset
	for {
		data, start, eof := r.read(off, min(limit, 256<<10))
		if len(data) > 0 || start != off {
			if err := fn(chunk(i, off, data, start)); err != nil {
				return err
			}
		}
		off = start + int64(len(data))
		if eof {
			<-p.done // the ring closes just before the process ends
			v := p.view()
			return fn(apitypes.ProcessLogs{Stream: streamName(i), Offset: off, NextOffset: off, Process: &v})
		}
		if len(data) == 0 {
			if err := r.wait(ctx, off); err != nil {
				return err
			}
		}
	}
}

// WriteProcessStdin queues input for a process, and closes its input
// when asked. A command that does not read makes the write wait, at most
// stdinWait: the reply then says how much was queued, with ErrConflict.
func (m *Manager) WriteProcessStdin(ctx context.Context, target, id string, in apitypes.ProcessStdin) (apitypes.ProcessStdinResult, error) {
	data := []byte(in.Data)
	if in.DataB64 != "" {
		if in.Data != "" {
			return apitypes.ProcessStdinResult{}, errdefs.Invalid("stdin: give data or data_b64, not both")
		}
		b, err := base64.StdEncoding.DecodeString(in.DataB64)
		if err != nil {
			return apitypes.ProcessStdinResult{}, errdefs.Invalid("stdin: data_b64: %v", err)
		}
		data = b
	}
	if len(data) > MaxStdinWrite {
		return apitypes.ProcessStdinResult{}, fmt.Errorf("stdin: %d bytes, over the %d one write takes: %w", len(data), MaxStdinWrite, errdefs.ErrTooLarge)
	}
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.ProcessStdinResult{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, stdinWait)
	defer cancel()
	n, err := p.stdin.write(wctx, data)
	res := apitypes.ProcessStdinResult{Written: int64(n)}
	if err != nil {
		var se stdinError
		switch {
		case errors.As(err, &se):
			return res, fmt.Errorf("writing to process %s: %w: %w", id, se, errdefs.ErrConflict)
		case ctx.Err() != nil:
			return res, ctx.Err()
		}
		return res, fmt.Errorf("writing to process %s: it has not read its input for %s; %d of %d bytes were queued: %w", id, stdinWait, n, len(data), errdefs.ErrConflict)
	}
	if in.Close {
		p.stdin.closeInput()
		res.Closed = true
	}
	return res, nil
}

// SignalProcess sends a signal (default TERM) to every process of a
// background process's tree. A process that has ended is not an error:
// the reply shows how it ended.
func (m *Manager) SignalProcess(ctx context.Context, target, id string, req apitypes.ProcessSignal) (apitypes.Process, error) {
	sig, err := ParseSignal(req.Signal)
	if err != nil {
		return apitypes.Process{}, err
	}
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.Process{}, err
	}
	if !p.ended() {
		p.mu.Lock()
		p.signaled = int(sig)
		p.mu.Unlock()
		if err := p.gp.SignalTree(sig); err != nil {
			return apitypes.Process{}, fmt.Errorf("signalling process %s: %w", id, err)
		}
		m.event(ctx, store.Event{Type: "process.signaled", WorkspaceID: p.workspaceID, SandboxID: p.sandboxID},
			map[string]any{"exec_id": p.id, "signal": int(sig)})
	}
	return p.view(), nil
}

// ResizeProcess sets the size of a background process's terminal, cols
// columns by rows rows (each 1 to MaxTerminalSize); the command's
// foreground process group gets SIGWINCH when the size changes. A process
// started without a terminal is ErrInvalid; one that has ended is not an
// error: the reply shows how it ended.
func (m *Manager) ResizeProcess(ctx context.Context, target, id string, cols, rows int) (apitypes.Process, error) {
	if _, _, err := terminalSize(cols, rows, false); err != nil {
		return apitypes.Process{}, err
	}
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.Process{}, err
	}
	if !p.tty {
		return apitypes.Process{}, errdefs.Invalid("process %s runs without a terminal (start it with tty to resize it)", id)
	}
	if !p.ended() {
		p.resizeMu.Lock()
		err := p.gp.Resize(uint16(rows), uint16(cols))
		if err == nil {
			p.mu.Lock()
			p.cols, p.rows = cols, rows
			p.mu.Unlock()
		}
		p.resizeMu.Unlock()
		if err != nil {
			return apitypes.Process{}, fmt.Errorf("resizing the terminal of process %s: %w", id, err)
		}
	}
	return p.view(), nil
}

// WaitProcess waits for a process to end, at most req.Timeout (default
// 30s, at most 10m), and shows it: still running if the time ran out.
func (m *Manager) WaitProcess(ctx context.Context, target, id string, req apitypes.ProcessWait) (apitypes.Process, error) {
	d := defaultProcessWait
	if req.Timeout != "" {
		v, err := time.ParseDuration(req.Timeout)
		if err != nil || v < 0 {
			return apitypes.Process{}, errdefs.Invalid("wait: timeout %q is not a duration like 30s", req.Timeout)
		}
		d = min(v, maxProcessWait)
	}
	p, err := m.process(ctx, target, id)
	if err != nil {
		return apitypes.Process{}, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
		return apitypes.Process{}, ctx.Err()
	}
	return p.view(), nil
}

// signals are the names ParseSignal knows, without SIG.
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "TSTP": syscall.SIGTSTP, "WINCH": syscall.SIGWINCH, "ALRM": syscall.SIGALRM,
	"PIPE": syscall.SIGPIPE,
}

// ParseSignal parses a signal name (TERM, SIGTERM, term) or number; empty
// is TERM.
func ParseSignal(s string) (syscall.Signal, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		return syscall.SIGTERM, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, errdefs.Invalid("signal %d is not between 1 and 64", n)
		}
		return syscall.Signal(n), nil
	}
	if sig, ok := signals[strings.TrimPrefix(s, "SIG")]; ok {
		return sig, nil
	}
	return 0, errdefs.Invalid("signal %q is not a signal name (TERM, KILL, INT, HUP, ...) or number", s)
}
