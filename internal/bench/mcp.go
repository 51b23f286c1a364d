package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// MCP round trip cases: one tool call that runs `true`, and the same exec
// through /v1.
const (
	CaseMCPAPI       = "exec true through /v1 (buffered, Go client)"
	CaseMCPAPIStream = "exec true through /v1 (streamed, Go client)"
	CaseMCPHTTP      = "run_command true through /mcp (streamable HTTP, Go SDK)"
	CaseMCPStdio     = "run_command true through agentbox mcp (stdio, Go SDK)"
)

// MCP defaults and target.
const (
	DefaultMCPRuns = 100
	// TargetMCPOverhead bounds what a tool call adds to the same exec
	// through /v1 (difference of the medians).
	TargetMCPOverhead = time.Millisecond
)

// MCP measures the round trip of an MCP tool call that runs `true` in a
// running sandbox of each backend, over stdio (`agentbox mcp`, a child
// process, which reaches the API through the Go client) and over
// streamable HTTP (the API's /mcp, over the manager), side by side with
// the same exec through /v1, in one run. opts.Binary is the agentbox
// binary run as `agentbox mcp`.
func MCP(ctx context.Context, opts SandboxOptions, log io.Writer) (res SandboxResult, err error) {
	opts = opts.withDefaults(DefaultMCPRuns)
	if err := opts.validate(); err != nil {
		return res, err
	}
	if fi, err := os.Stat(opts.Binary); opts.Binary == "" || err != nil || !fi.Mode().IsRegular() {
		return res, fmt.Errorf("bench mcp: agentbox binary %q to run as agentbox mcp: not a regular file (%v)", opts.Binary, err)
	}
	e, err := newEnv(ctx, opts, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	return e.mcpBench(ctx)
}

func (e *env) mcpBench(ctx context.Context) (SandboxResult, error) {
	res := SandboxResult{Benchmark: "mcp", Image: e.opts.Image, Backends: e.backends, Runs: e.opts.Runs}
	sock := filepath.Join(e.root, "agentbox.sock")
	sessions, err := e.mcpSessions(ctx, sock)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	var cases []tcase
	for _, b := range e.backends {
		w, err := e.workspace(ctx)
		if err != nil {
			return res, err
		}
		if _, err := e.m.CreateSandbox(ctx, w.ID, sandbox.Spec{Backend: b}); err != nil {
			return res, fmt.Errorf("bench: %s sandbox: %w", b, err)
		}
		ws := w.ID
		cases = append(cases,
			tcase{backend: b, name: CaseMCPAPI, baseline: true, run: func(ctx context.Context) (func() error, error) {
				out, err := e.c.ExecBuffered(ctx, ws, client.Exec{Argv: []string{"true"}}, nil)
				if err == nil && out.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", out.ExitCode)
				}
				return nil, err
			}},
			tcase{backend: b, name: CaseMCPAPIStream, baseline: true, run: func(ctx context.Context) (func() error, error) {
				r, err := e.c.Exec(ctx, ws, client.Exec{Argv: []string{"true"}}, nil, nil)
				if err == nil && r.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", r.ExitCode)
				}
				return nil, err
			}})
		for i, name := range []string{CaseMCPHTTP, CaseMCPStdio} {
			s := sessions[i]
			cases = append(cases, tcase{backend: b, name: name, run: func(ctx context.Context) (func() error, error) {
				return nil, runTrue(ctx, s, ws)
			}})
		}
	}
	e.logf("mcp: warm-up, then %d interleaved runs of %d cases", e.opts.Runs, len(cases))
	rows, err := e.measure(ctx, cases, 5, e.opts.Runs, nil)
	if err != nil {
		return res, err
	}
	res.Rows = rows
	for _, b := range e.backends {
		api, _ := row(rows, b, CaseMCPAPI)
		for _, c := range []struct{ name, label string }{{CaseMCPHTTP, "streamable HTTP"}, {CaseMCPStdio, "stdio"}} {
			r, _ := row(rows, b, c.name)
			added := r.Median - api.Median
			res.Checks = append(res.Checks, Check{
				Name:   fmt.Sprintf("%s: MCP over %s adds to /v1 (median - median)", b, c.label),
				Value:  added,
				Target: "<= " + fmtDur(TargetMCPOverhead),
				Met:    added <= TargetMCPOverhead,
			})
		}
	}
	res.Notes = append(res.Notes,
		"every case runs `true` in the same running sandbox of its backend's workspace; the MCP sessions are open and initialized before timing",
		"stdio: the client writes the call to agentbox mcp's stdin; agentbox mcp runs it as a streamed exec through the Go client on the API's unix socket; /mcp: the API server runs it through the manager",
		"a check's value is the MCP case's median minus the buffered /v1 case's; it can be negative when the difference is within the noise")
	return res, nil
}

// mcpSessions opens the two measured sessions: /mcp on the API's socket,
// and agentbox mcp as a child process reaching the API on it.
func (e *env) mcpSessions(ctx context.Context, sock string) ([]*mcp.ClientSession, error) {
	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-bench", Version: "1"}, nil)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	httpSession, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://agentbox/mcp", HTTPClient: hc}, nil)
	if err != nil {
		return nil, fmt.Errorf("bench mcp: connecting to /mcp: %w", err)
	}
	cmd := exec.Command(e.opts.Binary, "mcp")
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+sock)
	cmd.Stderr = e.log
	stdioSession, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		httpSession.Close()
		return nil, fmt.Errorf("bench mcp: starting %s mcp: %w", e.opts.Binary, err)
	}
	return []*mcp.ClientSession{httpSession, stdioSession}, nil
}

// runTrue calls run_command with argv true in workspace ws.
func runTrue(ctx context.Context, s *mcp.ClientSession, ws string) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"workspace": ws, "argv": []string{"true"}}})
	if err != nil {
		return err
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		return fmt.Errorf("run_command true: %s", b)
	}
	var out struct {
		ExitCode int `json:"exit_code"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out.ExitCode != 0 {
		return fmt.Errorf("run_command true: %s", b)
	}
	return nil
}
