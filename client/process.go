package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Background processes and ports.
type (
	// Process is a background process: a command started detached from
	// its request, whose output the daemon keeps in a bounded ring.
	Process = apitypes.Process
	// ProcessLogs is a slice of one of a process's output streams.
	ProcessLogs = apitypes.ProcessLogs
	// ProcessStdinResult says how much input a process took.
	ProcessStdinResult = apitypes.ProcessStdinResult
	// Port is a sandbox port published on the host's loopback.
	Port = apitypes.Port
)

// procPath is the path of target's processes (target is a workspace or a
// sandbox ID), of process id when set, and of its sub-resource op.
func procPath(target, id, op string) string {
	p := "/v1/workspaces/" + esc(target) + "/processes"
	if id != "" || op != "" {
		p += "/" + esc(id)
	}
	if op != "" {
		p += "/" + op
	}
	return p
}

// StartProcess starts a command in target's sandbox (starting or
// replacing one as Exec does) detached from the call: it runs on until it
// exits, is killed or its sandbox stops. req.Stdin is its first input.
func (c *Client) StartProcess(ctx context.Context, target string, req Exec) (Process, error) {
	var p Process
	return p, c.json(ctx, request{method: "POST", path: procPath(target, "", ""), body: req}, &p)
}

// ListProcesses lists target's background processes that the daemon
// holds, running and recently ended, newest first.
func (c *Client) ListProcesses(ctx context.Context, target string) ([]Process, error) {
	var out apitypes.ProcessList
	return out.Processes, c.json(ctx, request{method: "GET", path: procPath(target, "", "")}, &out)
}

// GetProcess shows one process.
func (c *Client) GetProcess(ctx context.Context, target, id string) (Process, error) {
	var p Process
	return p, c.json(ctx, request{method: "GET", path: procPath(target, id, "")}, &p)
}

// LogOptions select what a read of a process's logs returns.
type LogOptions struct {
	// Stream is "stdout" (default) or "stderr".
	Stream string
	// Offset is where to read from; negative counts from the end.
	Offset int64
	// Limit bounds the bytes of one reply (0: the daemon's most, 1 MiB).
	Limit int
}

func (o LogOptions) query(follow bool) url.Values {
	q := url.Values{}
	if o.Stream != "" {
		q.Set("stream", o.Stream)
	}
	if o.Offset != 0 {
		q.Set("offset", strconv.FormatInt(o.Offset, 10))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if follow {
		q.Set("follow", "true")
	}
	return q
}

// ProcessLogs reads one output stream of a process from an offset. Bytes
// that fell out of the ring are skipped: the reply's Dropped counts them.
// Continue from its NextOffset.
func (c *Client) ProcessLogs(ctx context.Context, target, id string, o LogOptions) (ProcessLogs, error) {
	var l ProcessLogs
	return l, c.json(ctx, request{method: "GET", path: procPath(target, id, "logs"), query: o.query(false)}, &l)
}

// FollowProcessLogs calls fn with each chunk of one output stream of a
// process from an offset as the process writes it, until the process has
// ended and everything was sent, and returns the ended process. It
// returns early with fn's error, or ctx's.
func (c *Client) FollowProcessLogs(ctx context.Context, target, id string, o LogOptions, fn func(ProcessLogs) error) (Process, error) {
	last, err := c.followOutput(ctx, procPath(target, id, "logs"), o, "process "+id, fn, func(l ProcessLogs) bool { return l.Process != nil })
	if err != nil {
		return Process{}, err
	}
	return *last.Process, nil
}

// LiveExec is an ordinary exec (not a background process) of the daemon,
// running or recently ended, whose recent output it keeps for any client
// to follow.
type LiveExec = apitypes.LiveExec

// LiveExecs lists a workspace's live execs (target is a workspace or a
// sandbox ID), newest first.
func (c *Client) LiveExecs(ctx context.Context, target string) ([]LiveExec, error) {
	var l apitypes.LiveExecList
	err := c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(target) + "/execs"}, &l)
	return l.Execs, err
}

// LiveExecOutput reads one output stream of a live exec from an offset,
// as ProcessLogs does.
func (c *Client) LiveExecOutput(ctx context.Context, id string, o LogOptions) (ProcessLogs, error) {
	var l ProcessLogs
	return l, c.json(ctx, request{method: "GET", path: "/v1/execs/" + esc(id) + "/output", query: o.query(false)}, &l)
}

// FollowLiveExecOutput calls fn with each chunk of one output stream of
// a live exec (one that another client's request runs, say) as the
// command writes it, until the exec has ended and everything was sent,
// and returns the ended exec. It returns early with fn's error, or ctx's.
func (c *Client) FollowLiveExecOutput(ctx context.Context, id string, o LogOptions, fn func(ProcessLogs) error) (LiveExec, error) {
	last, err := c.followOutput(ctx, "/v1/execs/"+esc(id)+"/output", o, "exec "+id, fn, func(l ProcessLogs) bool { return l.Exec != nil })
	if err != nil {
		return LiveExec{}, err
	}
	return *last.Exec, nil
}

// followOutput reads a followed output stream at path (NDJSON
// ProcessLogs lines), calling fn with every chunk of data, until the line
// for which last is true, which it returns.
func (c *Client) followOutput(ctx context.Context, path string, o LogOptions, what string, fn func(ProcessLogs) error, last func(ProcessLogs) bool) (ProcessLogs, error) {
	resp, err := c.do(ctx, request{method: "GET", path: path, query: o.query(true), accept: "application/x-ndjson"})
	if err != nil {
		return ProcessLogs{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue // keepalive
		}
		var l struct {
			ProcessLogs
			Error *struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return ProcessLogs{}, fmt.Errorf("reading the output of %s: %w", what, err)
		}
		if l.Error != nil {
			return ProcessLogs{}, &Error{Code: l.Error.Code, Message: l.Error.Message}
		}
		if len(l.Data) > 0 || l.DataB64 != "" || l.Dropped > 0 {
			if err := fn(l.ProcessLogs); err != nil {
				return ProcessLogs{}, err
			}
		}
		if last(l.ProcessLogs) {
			return l.ProcessLogs, nil
		}
	}
	if err := sc.Err(); err != nil {
		return ProcessLogs{}, fmt.Errorf("reading the output of %s: %w", what, err)
	}
	if ctx.Err() != nil {
		return ProcessLogs{}, ctx.Err()
	}
	return ProcessLogs{}, fmt.Errorf("reading the output of %s: %w", what, io.ErrUnexpectedEOF)
}

// WriteStdin queues data for a process's input and closes it when close
// is set. A process that does not read its input makes the call fail
// with ErrConflict after a while, saying how much was queued.
func (c *Client) WriteStdin(ctx context.Context, target, id string, data []byte, close bool) (ProcessStdinResult, error) {
	in := apitypes.ProcessStdin{Close: close}
	if len(data) > 0 {
		in.Data, in.DataB64 = textOrB64(data)
	}
	var r ProcessStdinResult
	return r, c.json(ctx, request{method: "POST", path: procPath(target, id, "stdin"), body: in}, &r)
}

// SignalProcess sends signal (a name like TERM or KILL, or a number;
// empty: TERM) to every process of a process's tree.
func (c *Client) SignalProcess(ctx context.Context, target, id, signal string) (Process, error) {
	var p Process
	return p, c.json(ctx, request{method: "POST", path: procPath(target, id, "signal"), body: apitypes.ProcessSignal{Signal: signal}}, &p)
}

// ResizeProcess sets the size of the terminal of a process started with
// TTY, cols columns by rows rows (each 1 to 1000); its foreground process
// group gets SIGWINCH. A process without a terminal is ErrInvalid.
func (c *Client) ResizeProcess(ctx context.Context, target, id string, cols, rows int) (Process, error) {
	var p Process
	return p, c.json(ctx, request{method: "POST", path: procPath(target, id, "resize"), body: apitypes.ProcessResize{Cols: cols, Rows: rows}}, &p)
}

// WaitProcess waits up to timeout (0: the daemon's 30s; at most 10m) for
// a process to end and shows it, still running if the time ran out.
func (c *Client) WaitProcess(ctx context.Context, target, id string, timeout time.Duration) (Process, error) {
	var w apitypes.ProcessWait
	if timeout > 0 {
		w.Timeout = timeout.String()
	}
	var p Process
	return p, c.json(ctx, request{method: "POST", path: procPath(target, id, "wait"), body: w}, &p)
}

// PublishPort publishes port of target's running sandbox on the host's
// loopback and returns its URL; publishing it again returns the same.
func (c *Client) PublishPort(ctx context.Context, target string, port int) (Port, error) {
	var p Port
	return p, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(target) + "/ports", body: apitypes.PortRequest{Port: port}}, &p)
}

// ListPorts lists the published ports of target's running sandbox.
func (c *Client) ListPorts(ctx context.Context, target string) ([]Port, error) {
	var out apitypes.PortList
	return out.Ports, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(target) + "/ports"}, &out)
}

// UnpublishPort closes a published port and its connections.
func (c *Client) UnpublishPort(ctx context.Context, target string, port int) error {
	return c.json(ctx, request{method: "DELETE", path: "/v1/workspaces/" + esc(target) + "/ports/" + strconv.Itoa(port)}, nil)
}

// textOrB64 is b as text when it is valid UTF-8, else as base64.
func textOrB64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}
