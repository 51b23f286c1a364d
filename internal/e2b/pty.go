package e2b

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/e2b/processpb"
	"github.com/agentbox/agentbox/internal/manager"
)

// ptyProc is a command on a terminal (the SDK's pty.create): a manager
// terminal session whose output goes to every stream that follows it
// (the Start stream, and Connect streams later), in order. A slow
// follower slows the terminal rather than losing its bytes; one whose
// stream fails stops following.
type ptyProc struct {
	sess *manager.Session

	mu   sync.Mutex
	subs map[int]func([]byte) error
	next int
	done chan struct{}
	// outcome is how the command ended, set before done closes.
	outcome manager.ExecOutcome
}

func (p *ptyProc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// pump reads the terminal until it ends, and waits for the command's end
// (killing it at waitCtx's end: the Start stream's deadline).
func (p *ptyProc) pump(waitCtx context.Context, cancel context.CancelFunc) {
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := p.sess.Read(buf)
			if n > 0 {
				b := append([]byte(nil), buf[:n]...)
				p.mu.Lock()
				for id, fn := range p.subs {
					if fn(b) != nil {
						delete(p.subs, id)
					}
				}
				p.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	out, _ := p.sess.Wait(waitCtx)
	wg.Wait()
	p.mu.Lock()
	p.outcome = out
	p.mu.Unlock()
	close(p.done)
}

// follower is one stream following a terminal.
type follower struct {
	p      *ptyProc
	id     int
	send   func(*processpb.ProcessEvent) error
	failed chan error
}

// subscribe registers a follower of the terminal's output from now on.
func (p *ptyProc) subscribe(send func(*processpb.ProcessEvent) error) *follower {
	var sendMu sync.Mutex
	f := &follower{p: p, failed: make(chan error, 1)}
	f.send = func(ev *processpb.ProcessEvent) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return send(ev)
	}
	p.mu.Lock()
	f.id = p.next
	p.next++
	p.subs[f.id] = func(b []byte) error {
		err := f.send(dataEvent("pty", b))
		if err != nil {
			select {
			case f.failed <- err:
			default:
			}
		}
		return err
	}
	p.mu.Unlock()
	return f
}

// follow sends the terminal's output from now on, then its end.
func (p *ptyProc) follow(ctx context.Context, every time.Duration, send func(*processpb.ProcessEvent) error) error {
	return p.subscribe(send).serve(ctx, every)
}

// serve sends keepalives until the terminal ends, then its end event.
func (f *follower) serve(ctx context.Context, every time.Duration) error {
	p, locked, failed := f.p, f.send, f.failed
	defer func() {
		p.mu.Lock()
		delete(p.subs, f.id)
		p.mu.Unlock()
	}()
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-p.done:
			p.mu.Lock()
			out := p.outcome
			p.mu.Unlock()
			state := "exited"
			switch {
			case out.Lost:
				state = "lost"
			case out.TimedOut:
				state = "timed_out"
			case out.Signal != 0 || out.Canceled:
				state = "killed"
			}
			return locked(endEvent(out.ExitCode, out.Signal, state, ""))
		case err := <-failed:
			return err
		case <-ctx.Done():
			return connectError(ctx.Err())
		case <-tick:
			if err := locked(keepaliveEvent()); err != nil {
				return err
			}
		}
	}
}

// startPTY runs a command on a terminal (pty.create). The terminal lives
// until the command ends, the Start stream's deadline, or a kill; a
// stream that ends without a deadline leaves it running for Connect.
func (ps *processService) startPTY(ctx context.Context, t target, msg *processpb.StartRequest, ereq apitypes.ExecRequest, h http.Header, send func(*processpb.ProcessEvent) error) error {
	size := msg.GetPty().GetSize()
	if size.GetCols() > 65535 || size.GetRows() > 65535 {
		return connectError(errors.New("terminal size over 65535"))
	}
	timeout := ereq.Timeout
	ereq.Timeout = ""
	greq, err := manager.Command(ereq)
	if err != nil {
		return connectError(err)
	}
	greq.Rows, greq.Cols = uint16(size.GetRows()), uint16(size.GetCols())
	sess, err := ps.s.m.OpenSession(ctx, t.WorkspaceID, greq)
	if err != nil {
		return connectError(err)
	}
	waitCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if timeout != "" {
		if d, err := time.ParseDuration(timeout); err == nil {
			waitCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), d)
		}
	}
	p := &ptyProc{sess: sess, subs: map[int]func([]byte) error{}, done: make(chan struct{})}
	pid := ps.s.procs.ptyPid()
	ps.s.procs.add(t.ID, &proc{pid: pid, tag: msg.GetTag(), cfg: msg.GetProcess(), pty: p})
	if err := send(startEvent(pid)); err != nil {
		sess.Close()
		cancel()
		return err
	}
	// The Start stream follows from the first byte: it subscribes
	// before pump reads.
	f := p.subscribe(send)
	go p.pump(waitCtx, cancel)
	return f.serve(ctx, keepalive(h))
}
