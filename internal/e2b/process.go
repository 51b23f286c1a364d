package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/e2b/processpb"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// processService is envd's process service over the manager's background
// processes: every command the SDK starts (commands.run, background or
// not, and pty.create, on a terminal) is an agentbox background process,
// whose output the daemon keeps in a ring per stream, so that a command outlives its stream and
// Connect can follow it again.
//
// Timeouts are E2B's: the Start stream's deadline (the SDK's timeoutMs,
// default 60 s, sent as Connect-Timeout-Ms) is the command's, and the
// daemon kills its whole tree then; a stream without one leaves the
// command running when it ends.
type processService struct {
	s *Server
}

// proc is a command an E2B sandbox started, by the pid the SDK knows it by.
type proc struct {
	pid uint32
	tag string
	cfg *processpb.ProcessConfig
	// execID names the manager's background process.
	execID string
	// tty says it runs on a terminal (the SDK's pty): its output is all
	// the terminal's, its input typed into it.
	tty bool
}

// procTable holds the commands of each E2B sandbox, in memory: a
// restarted daemon has lost them with their sandboxes.
type procTable struct {
	mu   sync.Mutex
	byID map[string]map[uint32]*proc
}

func newProcTable() *procTable {
	return &procTable{byID: map[string]map[uint32]*proc{}}
}

func (t *procTable) add(id string, p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[id] == nil {
		t.byID[id] = map[uint32]*proc{}
	}
	t.byID[id][p.pid] = p
}

func (t *procTable) drop(id string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID[id], pid)
}

// forget drops a sandbox's commands (they end with its sandbox).
func (t *procTable) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, id)
}

func (t *procTable) all(id string) []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Collect(maps.Values(t.byID[id]))
}

// find picks a command by pid or tag.
func (t *procTable) find(id string, sel *processpb.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch v := sel.GetSelector().(type) {
	case *processpb.ProcessSelector_Pid:
		if p := t.byID[id][v.Pid]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("process with pid %d %w in sandbox %s", v.Pid, errdefs.ErrNotFound, id)
	case *processpb.ProcessSelector_Tag:
		for _, p := range t.byID[id] {
			if p.tag != "" && p.tag == v.Tag {
				return p, nil
			}
		}
		return nil, fmt.Errorf("process with tag %q %w in sandbox %s", v.Tag, errdefs.ErrNotFound, id)
	}
	return nil, errdefs.Invalid("process selector: give a pid or a tag")
}

// running finds a command that still runs; one that ended is forgotten
// and not found, as envd does.
func (ps *processService) running(ctx context.Context, t target, sel *processpb.ProcessSelector) (*proc, error) {
	p, err := ps.s.procs.find(t.ID, sel)
	if err != nil {
		return nil, err
	}
	v, err := ps.s.m.GetProcess(ctx, t.WorkspaceID, p.execID)
	if err == nil && v.State != "running" {
		err = fmt.Errorf("process with pid %d %w in sandbox %s (it %s)", p.pid, errdefs.ErrNotFound, t.ID, v.State)
	}
	if err != nil {
		ps.s.procs.drop(t.ID, p.pid)
		return nil, err
	}
	return p, nil
}

// maxProcsHeld is how many commands of a sandbox the table holds before
// it drops those that ended (a command whose stream ended early stays
// until then, for Connect and List).
const maxProcsHeld = 64

// prune drops a sandbox's commands that ended.
func (ps *processService) prune(ctx context.Context, t target) {
	for _, p := range ps.s.procs.all(t.ID) {
		ps.running(ctx, t, &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: p.pid}})
	}
}

func (ps *processService) target(ctx context.Context, h http.Header) (target, error) {
	t, err := ps.s.resolve(ctx, h, "")
	return t, connectError(err)
}

// command is the agentbox request for an E2B process config.
func command(ctx context.Context, t target, cfg *processpb.ProcessConfig) (apitypes.ExecRequest, error) {
	if cfg == nil || cfg.GetCmd() == "" {
		return apitypes.ExecRequest{}, errdefs.Invalid("process: cmd is empty")
	}
	req := apitypes.ExecRequest{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Workdir: t.workdir(cfg.GetCwd())}
	for _, k := range slices.Sorted(maps.Keys(cfg.GetEnvs())) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return apitypes.ExecRequest{}, errdefs.Invalid("process: env name %q is empty or has = or NUL", k)
		}
		req.Env = append(req.Env, k+"="+cfg.GetEnvs()[k])
	}
	if _, ok := cfg.GetEnvs()["PWD"]; !ok {
		// A shell shows the directory by this name (the home, not the
		// /workspace it links to) when it is the same directory.
		req.Env = append(req.Env, "PWD="+req.Workdir)
	}
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d <= 0 {
			return apitypes.ExecRequest{}, connect.NewError(connect.CodeDeadlineExceeded, errors.New("process: the request's deadline has passed"))
		}
		req.Timeout = d.String()
	}
	return req, nil
}

func (ps *processService) Start(ctx context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return err
	}
	msg := req.Msg
	ereq, err := command(ctx, t, msg.GetProcess())
	if err != nil {
		return connectError(err)
	}
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.StartResponse{Event: ev}) }
	tty := msg.Pty != nil
	if tty {
		// The SDK's pty: a terminal of the size asked for (80x24 when it
		// names none), its input open for typing.
		size := msg.GetPty().GetSize()
		ereq.TTY, ereq.Cols, ereq.Rows = true, int(size.GetCols()), int(size.GetRows())
		if ereq.Cols == 0 || ereq.Rows == 0 {
			ereq.Cols, ereq.Rows = 80, 24
		}
	}
	v, err := ps.s.m.StartProcess(ctx, t.WorkspaceID, ereq)
	if err != nil {
		return connectError(err)
	}
	if !tty && !msg.GetStdin() {
		// The SDK's default: the command reads end of file.
		if _, err := ps.s.m.WriteProcessStdin(ctx, t.WorkspaceID, v.ID, apitypes.ProcessStdin{Close: true}); err != nil && !errors.Is(err, errdefs.ErrConflict) {
			return connectError(err)
		}
	}
	p := &proc{pid: uint32(v.Pid), tag: msg.GetTag(), cfg: msg.GetProcess(), execID: v.ID, tty: tty}
	if len(ps.s.procs.all(t.ID)) >= maxProcsHeld {
		ps.prune(ctx, t)
	}
	ps.s.procs.add(t.ID, p)
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	if err := ps.follow(ctx, t, p, 0, 0, req.Header(), send); err != nil {
		return err
	}
	// Its end was sent: envd forgets an ended command.
	ps.s.procs.drop(t.ID, p.pid)
	return nil
}

func (ps *processService) Connect(ctx context.Context, req *connect.Request[processpb.ConnectRequest], stream *connect.ServerStream[processpb.ConnectResponse]) error {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return err
	}
	p, err := ps.running(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return connectError(err)
	}
	send := func(ev *processpb.ProcessEvent) error { return stream.Send(&processpb.ConnectResponse{Event: ev}) }
	// From now on, as envd: what the command wrote before is not sent
	// again.
	v, err := ps.s.m.GetProcess(ctx, t.WorkspaceID, p.execID)
	if err != nil {
		return connectError(err)
	}
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	return ps.follow(ctx, t, p, v.StdoutBytes, v.StderrBytes, req.Header(), send)
}

// keepalive is the interval the SDK asks for (Keepalive-Ping-Interval,
// seconds); 0: none.
func keepalive(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

func startEvent(pid uint32) *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}
}

func dataEvent(stream string, b []byte) *processpb.ProcessEvent {
	d := &processpb.ProcessEvent_DataEvent{}
	switch stream {
	case "stdout":
		d.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case "stderr":
		d.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: d}}
}

func keepaliveEvent() *processpb.ProcessEvent {
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}
}

// endEvent says how a command ended, in the words of Go's
// os.ProcessState, which is what envd sends: "exit status 1", "signal:
// killed"; error is set when the command did not exit with 0.
func endEvent(exitCode, signal int, state, reason string) *processpb.ProcessEvent {
	e := &processpb.ProcessEvent_EndEvent{ExitCode: int32(exitCode)}
	switch {
	case state == "exited":
		e.Exited = true
		e.Status = fmt.Sprintf("exit status %d", exitCode)
		if exitCode != 0 {
			e.Error = &e.Status
		}
	case signal != 0:
		e.ExitCode = -1
		e.Status = "signal: " + syscall.Signal(signal).String()
		e.Error = &e.Status
	default:
		e.ExitCode = -1
		e.Status = state
		msg := state
		if state == "timed_out" {
			msg = "the command's timeout ran out; its process tree was killed"
		}
		if reason != "" {
			msg += ": " + reason
		}
		e.Error = &msg
	}
	return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: e}}
}

// follow streams a background process's stdout and stderr from the given
// offsets as data events (a terminal's as pty events: it has no stderr),
// then its end, with keepalives between as the SDK asked.
func (ps *processService) follow(ctx context.Context, t target, p *proc, outOff, errOff int64, h http.Header, send func(*processpb.ProcessEvent) error) error {
	execID := p.execID
	var mu sync.Mutex
	locked := func(ev *processpb.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return send(ev)
	}
	g, gctx := errgroup.WithContext(ctx)
	var final *apitypes.Process
	var finalMu sync.Mutex
	for _, st := range []struct {
		name string
		off  int64
	}{{"stdout", outOff}, {"stderr", errOff}} {
		g.Go(func() error {
			return ps.s.m.FollowProcessLogs(gctx, t.WorkspaceID, execID, apitypes.LogQuery{Stream: st.name, Offset: st.off}, func(l apitypes.ProcessLogs) error {
				b := []byte(l.Data)
				if l.DataB64 != "" {
					var err error
					if b, err = base64.StdEncoding.DecodeString(l.DataB64); err != nil {
						return err
					}
				}
				if len(b) > 0 {
					kind := st.name
					if p.tty {
						kind = "pty"
					}
					if err := locked(dataEvent(kind, b)); err != nil {
						return err
					}
				}
				if l.Process != nil && l.Process.State != "running" {
					finalMu.Lock()
					final = l.Process
					finalMu.Unlock()
				}
				return nil
			})
		})
	}
	stop := make(chan struct{})
	if every := keepalive(h); every > 0 {
		go func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					locked(keepaliveEvent())
				}
			}
		}()
	}
	err := g.Wait()
	close(stop)
	if err != nil {
		return connectError(err)
	}
	if final == nil {
		v, err := ps.s.m.GetProcess(ctx, t.WorkspaceID, execID)
		if err != nil {
			return connectError(err)
		}
		final = &v
	}
	return locked(endEvent(final.ExitCode, final.Signal, final.State, final.Reason))
}

func (ps *processService) List(ctx context.Context, req *connect.Request[processpb.ListRequest]) (*connect.Response[processpb.ListResponse], error) {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	out := &processpb.ListResponse{}
	for _, p := range ps.s.procs.all(t.ID) {
		if _, err := ps.running(ctx, t, &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: p.pid}}); err != nil {
			continue
		}
		info := &processpb.ProcessInfo{Config: p.cfg, Pid: p.pid}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out.Processes = append(out.Processes, info)
	}
	slices.SortFunc(out.Processes, func(a, b *processpb.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	return connect.NewResponse(out), nil
}

func (ps *processService) SendInput(ctx context.Context, req *connect.Request[processpb.SendInputRequest]) (*connect.Response[processpb.SendInputResponse], error) {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	if err := ps.input(ctx, t, req.Msg.GetProcess(), req.Msg.GetInput()); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&processpb.SendInputResponse{}), nil
}

// input writes to a command's stdin or terminal.
func (ps *processService) input(ctx context.Context, t target, sel *processpb.ProcessSelector, in *processpb.ProcessInput) error {
	p, err := ps.running(ctx, t, sel)
	if err != nil {
		return err
	}
	switch v := in.GetInput().(type) {
	case *processpb.ProcessInput_Stdin:
		if p.tty {
			return errdefs.Invalid("process %d runs on a terminal: send pty input", p.pid)
		}
		_, err := ps.s.m.WriteProcessStdin(ctx, t.WorkspaceID, p.execID, apitypes.ProcessStdin{DataB64: base64.StdEncoding.EncodeToString(v.Stdin)})
		return err
	case *processpb.ProcessInput_Pty:
		if !p.tty {
			return errdefs.Invalid("process %d has no terminal: send stdin", p.pid)
		}
		_, err := ps.s.m.WriteProcessStdin(ctx, t.WorkspaceID, p.execID, apitypes.ProcessStdin{DataB64: base64.StdEncoding.EncodeToString(v.Pty)})
		return err
	}
	return errdefs.Invalid("input: give stdin or pty bytes")
}

func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processpb.StreamInputRequest]) (*connect.Response[processpb.StreamInputResponse], error) {
	t, err := ps.target(ctx, stream.RequestHeader())
	if err != nil {
		return nil, err
	}
	var sel *processpb.ProcessSelector
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *processpb.StreamInputRequest_Start:
			sel = ev.Start.GetProcess()
		case *processpb.StreamInputRequest_Data:
			if sel == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("stream input: the first message must be start, naming the process"))
			}
			if err := ps.input(ctx, t, sel, ev.Data.GetInput()); err != nil {
				return nil, connectError(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processpb.StreamInputResponse{}), nil
}

func (ps *processService) SendSignal(ctx context.Context, req *connect.Request[processpb.SendSignalRequest]) (*connect.Response[processpb.SendSignalResponse], error) {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case processpb.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case processpb.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %d: envd sends SIGTERM (15) or SIGKILL (9)", req.Msg.GetSignal()))
	}
	p, err := ps.running(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	if _, err := ps.s.m.SignalProcess(ctx, t.WorkspaceID, p.execID, apitypes.ProcessSignal{Signal: sig}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&processpb.SendSignalResponse{}), nil
}

func (ps *processService) CloseStdin(ctx context.Context, req *connect.Request[processpb.CloseStdinRequest]) (*connect.Response[processpb.CloseStdinResponse], error) {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := ps.running(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	if p.tty {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process %d runs on a terminal, which has no stdin to close (send ^D)", p.pid))
	}
	if _, err := ps.s.m.WriteProcessStdin(ctx, t.WorkspaceID, p.execID, apitypes.ProcessStdin{Close: true}); err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return nil, connectError(err)
	}
	return connect.NewResponse(&processpb.CloseStdinResponse{}), nil
}

func (ps *processService) Update(ctx context.Context, req *connect.Request[processpb.UpdateRequest]) (*connect.Response[processpb.UpdateResponse], error) {
	t, err := ps.target(ctx, req.Header())
	if err != nil {
		return nil, err
	}
	p, err := ps.running(ctx, t, req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	size := req.Msg.GetPty().GetSize()
	if size == nil {
		return connect.NewResponse(&processpb.UpdateResponse{}), nil
	}
	if !p.tty {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process %d has no terminal to resize", p.pid))
	}
	if size.GetCols() > 1<<16 || size.GetRows() > 1<<16 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("terminal size %dx%d is too large", size.GetCols(), size.GetRows()))
	}
	if _, err := ps.s.m.ResizeProcess(ctx, t.WorkspaceID, p.execID, int(size.GetCols()), int(size.GetRows())); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&processpb.UpdateResponse{}), nil
}
