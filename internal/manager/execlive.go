package manager

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Live output of ordinary execs. The client that runs an exec gets its
// output through its own request; anyone else (the dashboard, another
// CLI) follows it by exec ID from the rings this file keeps: the same
// rings as a background process's (ring.go), fed by a tee in front of the
// caller's writers. The tee adds one copy per byte (into the ring), takes
// the ring's lock only for that copy and never across the write to the
// caller, and the ring makes no channel per write while nobody follows.
// Memory is bounded per exec (two rings of ExecRingBytes, grown only as
// output comes) and in total (maxExecRings rings' worth, running and
// kept): an exec that starts when the budget is taken by running ones
// keeps no output, and says so (RingBytes 0). Ended execs stay followable
// until maxEndedExecs more have ended or their room is needed.
const (
	// ExecRingBytes is how much of each of a running exec's stdout and
	// stderr the daemon keeps: the last 256 KiB.
	ExecRingBytes = 256 << 10
	// maxExecRings bounds the execs whose output is kept at once:
	// 128 * 2 * 256 KiB = 64 MiB at most.
	maxExecRings = 128
	// maxEndedExecs bounds the ended execs kept (the oldest is forgotten
	// first), rings or not.
	maxEndedExecs = 64
)

// liveExec is an ordinary exec this daemon runs.
type liveExec struct {
	id, workspaceID, sandboxID string
	argv                       []string
	started                    time.Time
	out                        [2]*ring // nil: no room for its output
	done                       chan struct{}

	mu       sync.Mutex
	state    string
	exitCode int
	finished time.Time
}

func (e *liveExec) view() apitypes.LiveExec {
	e.mu.Lock()
	defer e.mu.Unlock()
	v := apitypes.LiveExec{ID: e.id, WorkspaceID: e.workspaceID, SandboxID: e.sandboxID, Argv: shortArgv(slices.Clone(e.argv)),
		State: e.state, ExitCode: e.exitCode, StartedAt: e.started}
	if e.out[0] != nil {
		v.StdoutBytes, v.StderrBytes, v.RingBytes = e.out[0].written(), e.out[1].written(), ExecRingBytes
	}
	if !e.finished.IsZero() {
		f := e.finished
		v.FinishedAt = &f
	}
	return v
}

// execTable holds the live execs of this daemon.
type execTable struct {
	mu      sync.Mutex
	byID    map[string]*liveExec
	running []*liveExec // oldest first
	ended   []*liveExec // oldest first
	rings   int         // execs of both lists holding rings
	// changed, made by the first follower that waits, is closed (and
	// dropped) when an exec starts or ends.
	changed chan struct{}
}

// begin records an exec that starts, with rings when there is room:
// ended execs give theirs up, oldest first, running ones never.
func (t *execTable) begin(rec store.Exec, argv []string) *liveExec {
	e := &liveExec{id: rec.ID, workspaceID: rec.WorkspaceID, sandboxID: rec.SandboxID, argv: argv,
		started: rec.StartedAt, done: make(chan struct{}), state: store.ExecRunning, exitCode: -1}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[string]*liveExec{}
	}
	for t.rings >= maxExecRings && len(t.ended) > 0 {
		t.forgetOldestEnded()
	}
	if t.rings < maxExecRings {
		e.out = [2]*ring{newRing(ExecRingBytes), newRing(ExecRingBytes)}
		t.rings++
	}
	t.byID[e.id] = e
	t.running = append(t.running, e)
	t.notify()
	return e
}

// end records how e ended and closes its rings: its followers read to
// the end and are told.
func (t *execTable) end(e *liveExec, rec store.Exec) {
	e.mu.Lock()
	e.state, e.exitCode, e.finished = rec.State, rec.ExitCode, rec.FinishedAt
	if e.finished.IsZero() {
		e.finished = time.Now().UTC()
	}
	e.mu.Unlock()
	if e.out[0] != nil {
		e.out[0].close()
		e.out[1].close()
	}
	close(e.done)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.running, e); i >= 0 {
		t.running = slices.Delete(t.running, i, i+1)
	}
	t.ended = append(t.ended, e)
	for len(t.ended) > maxEndedExecs {
		t.forgetOldestEnded()
	}
	t.notify()
}

// forgetOldestEnded drops the oldest ended exec; t.mu must be held.
func (t *execTable) forgetOldestEnded() {
	old := t.ended[0]
	t.ended = slices.Delete(t.ended, 0, 1)
	delete(t.byID, old.id)
	if old.out[0] != nil {
		t.rings--
	}
}

// notify wakes the followers of the table; t.mu must be held.
func (t *execTable) notify() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// watch returns a channel closed at the table's next change; t.mu must
// be held.
func (t *execTable) watch() <-chan struct{} {
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// ofWorkspace lists wsID's live execs, newest first; t.mu must be held.
func (t *execTable) ofWorkspace(wsID string) []*liveExec {
	var out []*liveExec
	for _, list := range [][]*liveExec{t.ended, t.running} {
		for _, e := range list {
			if e.workspaceID == wsID {
				out = append(out, e)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *liveExec) int { return b.started.Compare(a.started) })
	return out
}

// teeRing writes every chunk of one output stream of an exec to its
// ring and then to the caller's writer (nil: none). The ring takes the
// bytes first so that a follower is never behind a slow caller; the
// caller's error is the writer's, as without the tee.
type teeRing struct {
	r *ring
	w io.Writer
}

func (t teeRing) Write(p []byte) (int, error) {
	t.r.Write(p)
	if t.w == nil {
		return len(p), nil
	}
	return t.w.Write(p)
}

// teeOutput puts e's rings in front of stdout and stderr.
func (e *liveExec) teeOutput(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	if e.out[0] == nil {
		return stdout, stderr
	}
	return teeRing{e.out[0], stdout}, teeRing{e.out[1], stderr}
}

// liveExecOf finds exec id; an ID this daemon does not hold (any more)
// is ErrNotFound, saying why when it names an exec.
func (m *Manager) liveExecOf(ctx context.Context, id string) (*liveExec, error) {
	m.execs.mu.Lock()
	e := m.execs.byID[id]
	m.execs.mu.Unlock()
	if e != nil {
		return e, nil
	}
	if strings.TrimSpace(id) != "" {
		if x, err := m.st.GetExec(ctx, id); err == nil {
			why := "it is a background process (read its logs), ran on another daemon, or ended before the daemon's last start"
			if x.State != store.ExecRunning {
				why = fmt.Sprintf("it ended and was forgotten among more than %d ended execs, or is a background process (read its logs)", maxEndedExecs)
			}
			return nil, fmt.Errorf("exec %s %w: this daemon holds no output of it (%s); its record says %s", id, errdefs.ErrNotFound, why, x.State)
		}
	}
	return nil, fmt.Errorf("exec %q %w", id, errdefs.ErrNotFound)
}

// ListLiveExecs lists the live execs of target's workspace (running and
// recently ended, this daemon's), newest first.
func (m *Manager) ListLiveExecs(ctx context.Context, target string) ([]apitypes.LiveExec, error) {
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return nil, err
	}
	m.execs.mu.Lock()
	list := m.execs.ofWorkspace(wsID)
	m.execs.mu.Unlock()
	out := make([]apitypes.LiveExec, 0, len(list))
	for _, e := range list {
		out = append(out, e.view())
	}
	return out, nil
}

// FollowLiveExecs sends target's live execs to fn, oldest first, then
// each one that starts and each that ends, as it does, until fn fails or
// ctx ends.
func (m *Manager) FollowLiveExecs(ctx context.Context, target string, fn func(apitypes.LiveExec) error) error {
	wsID, err := m.ExecTarget(ctx, target)
	if err != nil {
		return err
	}
	sent := map[string]string{} // exec ID -> the state sent
	for {
		m.execs.mu.Lock()
		list := m.execs.ofWorkspace(wsID)
		changed := m.execs.watch()
		m.execs.mu.Unlock()
		keep := make(map[string]string, len(list))
		for i := len(list) - 1; i >= 0; i-- {
			v := list[i].view()
			keep[v.ID] = v.State
			if sent[v.ID] == v.State {
				continue
			}
			if err := fn(v); err != nil {
				return err
			}
		}
		sent = keep
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// LiveExecOutput reads one output stream of a live exec from an offset,
// as far as its ring holds it (as ProcessLogs does).
func (m *Manager) LiveExecOutput(ctx context.Context, id string, q LogQuery) (apitypes.ProcessLogs, error) {
	e, err := m.liveExecOf(ctx, id)
	if err != nil {
		return apitypes.ProcessLogs{}, err
	}
	i, limit, err := checkLogQuery(q)
	if err != nil {
		return apitypes.ProcessLogs{}, err
	}
	var l apitypes.ProcessLogs
	if e.out[i] != nil {
		data, start, _ := e.out[i].read(q.Offset, min(limit, ExecRingBytes))
		l = chunk(i, q.Offset, data, start)
	} else {
		l = apitypes.ProcessLogs{Stream: streamName(i)}
	}
	v := e.view()
	l.Exec = &v
	return l, nil
}

// FollowLiveExecOutput sends one output stream of a live exec from an
// offset to fn as it is written, until the exec has ended and everything
// was sent (the last call carries the ended exec and no data), fn fails
// or ctx ends. An exec whose output is not kept sends only its end.
func (m *Manager) FollowLiveExecOutput(ctx context.Context, id string, q LogQuery, fn func(apitypes.ProcessLogs) error) error {
	e, err := m.liveExecOf(ctx, id)
	if err != nil {
		return err
	}
	i, limit, err := checkLogQuery(q)
	if err != nil {
		return err
	}
	r := e.out[i]
	off := q.Offset
	for r != nil {
		data, start, eof := r.read(off, min(limit, 64<<10))
		if len(data) > 0 || start != off {
			if err := fn(chunk(i, off, data, start)); err != nil {
				return err
			}
		}
		off = start + int64(len(data))
		if eof {
			break
		}
		if len(data) == 0 {
			if err := r.wait(ctx, off); err != nil {
				return err
			}
		}
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	v := e.view()
	off = max64(off, 0)
	return fn(apitypes.ProcessLogs{Stream: streamName(i), Offset: off, NextOffset: off, Exec: &v})
}
