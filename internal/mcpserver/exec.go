package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

type runIn struct {
	Workspace      string            `json:"workspace,omitempty" jsonschema:"the workspace ID (default: the session's workspace)"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run as sh -c COMMAND (give this or argv)"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (give this or command)"`
	Workdir        string            `json:"workdir,omitempty" jsonschema:"the working directory (default /workspace)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to add, NAME -> value"`
	Timeout        string            `json:"timeout,omitempty" jsonschema:"kill the command after this long: a duration like 30s, 5m or 1h (default 10m)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text fed to the command's standard input"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"how much of each of stdout and stderr to keep, its first and last halves (default 32768)"`
}

// runCommand runs a command and returns how it ended with the start and
// the end of its output. The structured output is the API's buffered
// exec reply (apitypes.ExecOutput), with stdout and stderr cut in their
// middle rather than at their end.
func (c *call) runCommand(in runIn) (apitypes.ExecOutput, string, error) {
	id, err := c.workspace(in.Workspace)
	if err != nil {
		return apitypes.ExecOutput{}, "", err
	}
	keep := in.MaxOutputBytes
	switch {
	case keep == 0:
		keep = DefaultRunOutput
	case keep < 0 || keep > MaxRunOutput:
		return apitypes.ExecOutput{}, "", errdefs.Invalid("run_command: max_output_bytes %d is not between 1 and %d", keep, MaxRunOutput)
	}
	timeout := in.Timeout
	if timeout == "" {
		timeout = DefaultRunTimeout.String()
	}
	req := apitypes.ExecRequest{Argv: in.Argv, Sh: in.Command, Env: sortedEnv(in.Env), Workdir: in.Workdir, Timeout: timeout, Stdin: in.Stdin}
	stdout, stderr := newHeadTail(keep), newHeadTail(keep)
	var p *progress
	if tok := c.req.Params.GetProgressToken(); tok != nil && c.session != nil {
		p = startProgress(c.ctx, c.session, tok)
	}
	res, err := c.s.b.Exec(c.ctx, id, req, teeWriter{stdout, p}, teeWriter{stderr, p})
	p.stop()
	if err != nil {
		return apitypes.ExecOutput{}, "", err
	}
	out := apitypes.ExecOutput{
		ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, OOM: res.OOM,
		DurationMS: res.DurationMS, ExecID: res.ExecID, SandboxID: res.SandboxID, Replaced: res.Replaced,
		Canceled: res.Canceled, Lost: res.Lost,
		StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes, CPUNanos: res.CPUNanos, PeakMemBytes: res.PeakMemBytes,
	}
	var cutOut, cutErr bool
	out.Stdout, cutOut = stdout.text("stdout", res.StdoutBytes)
	out.Stderr, cutErr = stderr.text("stderr", res.StderrBytes)
	out.StdoutTruncated = cutOut || res.StdoutTruncated
	out.StderrTruncated = cutErr || res.StderrTruncated
	out.Truncated = out.StdoutTruncated || out.StderrTruncated
	return out, runText(out, timeout), nil
}

// runText is how a command ended, then its output, for a model.
func runText(o apitypes.ExecOutput, timeout string) string {
	var b strings.Builder
	dur := time.Duration(o.DurationMS) * time.Millisecond
	switch {
	case o.TimedOut:
		fmt.Fprintf(&b, "timed out: killed after %s (timeout %s)", dur, timeout)
	case o.OOM:
		fmt.Fprintf(&b, "out of memory: killed for exceeding the sandbox's memory limit after %s", dur)
	case o.Lost:
		fmt.Fprintf(&b, "the sandbox died while the command ran (%s); the next command starts a new one", dur)
	case o.Canceled:
		fmt.Fprintf(&b, "canceled after %s", dur)
	case o.Signal != 0:
		fmt.Fprintf(&b, "killed by signal %d after %s", o.Signal, dur)
	default:
		fmt.Fprintf(&b, "exit code %d after %s", o.ExitCode, dur)
	}
	if o.Signal == 0 && (o.TimedOut || o.OOM) {
		fmt.Fprintf(&b, ", exit code %d", o.ExitCode)
	}
	if o.Replaced {
		b.WriteString(" (in a new sandbox: the workspace's previous one was gone)")
	}
	b.WriteString("\n")
	for _, s := range []struct{ name, text string }{{"stdout", o.Stdout}, {"stderr", o.Stderr}} {
		if s.text == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s ---\n%s", s.name, s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteString("\n")
		}
	}
	if o.Stdout == "" && o.Stderr == "" {
		b.WriteString("(no output)\n")
	}
	return b.String()
}

// headTail keeps the first and the last bytes of what is written to it,
// about max in all, and counts the rest.
type headTail struct {
	mu         sync.Mutex
	half, rest int
	head, tail []byte
	total      int64
}

func newHeadTail(max int) *headTail { return &headTail{half: max / 2, rest: max - max/2} }

func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(p)
	h.total += int64(n)
	if room := h.half - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		h.tail = append(h.tail, p...)
		// Keep at most twice what is shown, moving it down now and then.
		if len(h.tail) > 2*h.rest {
			h.tail = append(h.tail[:0], h.tail[len(h.tail)-h.rest:]...)
		}
	}
	return n, nil
}

// text is what was kept as valid UTF-8, with a note in place of what was
// left out; written is how much the command wrote in all (the guest may
// have dropped some past its own cap). cut says something was left out.
func (h *headTail) text(stream string, written int64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	head, tail := h.head, h.tail
	if len(tail) > h.rest {
		tail = tail[len(tail)-h.rest:]
	}
	omitted := max(written, h.total) - int64(len(head)) - int64(len(tail))
	if omitted <= 0 {
		return strings.ToValidUTF8(string(head)+string(tail), "\uFFFD"), false
	}
	// Cut on character boundaries: drop a split rune at each edge.
	head = head[:wholeRunes(head)]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	omitted = max(written, h.total) - int64(len(head)) - int64(len(tail))
	note := fmt.Sprintf("\n[... %d bytes of %s left out ...]\n", omitted, stream)
	return strings.ToValidUTF8(string(head), "\uFFFD") + note + strings.ToValidUTF8(string(tail), "\uFFFD"), true
}

// Progress of a running command: its output, as it arrives, in the
// messages of progress notifications.
const (
	// progressEvery is how often pending output is sent.
	progressEvery = 200 * time.Millisecond
	// progressChunk sends pending output at once when this much waits.
	progressChunk = 16 << 10
	// progressHeartbeat sends a notification without output when none
	// was sent for this long, so that a client waiting with a timeout
	// that progress resets keeps waiting.
	progressHeartbeat = 10 * time.Second
	// maxProgressOutput is the most output sent as progress per call;
	// past it only heartbeats go out (the result still has the end).
	maxProgressOutput = 1 << 20
)

// progress sends a command's output as progress notifications. Writers
// never wait for the client: output is buffered (within
// maxProgressOutput) and a goroutine of its own sends it.
type progress struct {
	session *mcp.ServerSession
	token   any
	ctx     context.Context
	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex
	pending []byte
	queued  int // output bytes ever queued
	dropped bool
}

func startProgress(ctx context.Context, ss *mcp.ServerSession, token any) *progress {
	p := &progress{session: ss, token: token, ctx: ctx, kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go p.run()
	return p
}

// teeWriter writes to a headTail and to progress, if any.
type teeWriter struct {
	h *headTail
	p *progress
}

func (t teeWriter) Write(b []byte) (int, error) {
	t.h.Write(b)
	t.p.add(b)
	return len(b), nil
}

func (p *progress) add(b []byte) {
	if p == nil {
		return
	}
	p.mu.Lock()
	room := maxProgressOutput - p.queued
	if len(b) > room {
		b = b[:max(room, 0)]
		p.dropped = true
	}
	p.pending = append(p.pending, b...)
	p.queued += len(b)
	full := len(p.pending) >= progressChunk
	p.mu.Unlock()
	if full {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// stop sends what is pending and returns once the last notification
// went out (so that it reaches the client before the result).
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.done)
	<-p.stopped
}

func (p *progress) run() {
	defer close(p.stopped)
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	var n float64
	last := time.Now()
	notedDrop := false
	send := func(msg string, heartbeat bool) {
		if msg == "" && !heartbeat {
			return
		}
		n++
		// The progress value counts notifications: it must grow with
		// each one, and the output's size is unknown in advance.
		p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: n, Message: msg})
		last = time.Now()
	}
	flush := func() {
		p.mu.Lock()
		b := p.pending
		// Hold back a rune split across writes.
		cut := wholeRunes(b)
		msg := strings.ToValidUTF8(string(b[:cut]), "\uFFFD")
		p.pending = append([]byte(nil), b[cut:]...)
		dropped := p.dropped
		p.mu.Unlock()
		send(msg, false)
		if dropped && !notedDrop {
			notedDrop = true
			send(fmt.Sprintf("\n[output past %d bytes is not sent as progress; the result keeps its start and end]\n", maxProgressOutput), false)
		}
	}
	for {
		select {
		case <-p.done:
			flush()
			p.mu.Lock()
			rest := strings.ToValidUTF8(string(p.pending), "\uFFFD")
			p.mu.Unlock()
			send(rest, false)
			return
		case <-p.ctx.Done():
			<-p.done
			return
		case <-p.kick:
			flush()
		case <-tick.C:
			flush()
			if time.Since(last) >= progressHeartbeat {
				send("", true)
			}
		}
	}
}

// wholeRunes is the length of b without a rune cut short at its end.
func wholeRunes(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
