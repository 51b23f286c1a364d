package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"
)

// Limits are a sandbox's hard limits; zero fields take the daemon's defaults.
type Limits struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	TmpBytes    int64   `json:"tmp_bytes,omitempty"`
}

// CreateSandbox asks for a sandbox on a workspace.
type CreateSandbox struct {
	Workspace string `json:"workspace"`
	Backend   string `json:"backend,omitempty"`
	Image     string `json:"image,omitempty"`
	Limits    Limits `json:"limits,omitempty"`
	Lifetime  string `json:"lifetime,omitempty"`
}

// Sandbox is an execution environment attached to a workspace.
type Sandbox struct {
	ID             string    `json:"id"`
	WorkspaceID    string    `json:"workspace_id"`
	Backend        string    `json:"backend"`
	BackendRef     string    `json:"backend_ref"`
	Image          string    `json:"image"`
	Spec           string    `json:"spec"`
	State          string    `json:"state"`
	Replaces       string    `json:"replaces,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	LastActivityAt time.Time `json:"last_activity_at"`
}

// CreateSandbox starts a sandbox.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandbox) (Sandbox, error) {
	var sb Sandbox
	return sb, c.json(ctx, request{method: "POST", path: "/v1/sandboxes", body: req}, &sb)
}

// ListSandboxes lists sandboxes, optionally of one workspace.
func (c *Client) ListSandboxes(ctx context.Context, workspace string) ([]Sandbox, error) {
	q := url.Values{}
	if workspace != "" {
		q.Set("workspace", workspace)
	}
	var out struct{ Sandboxes []Sandbox }
	return out.Sandboxes, c.json(ctx, request{method: "GET", path: "/v1/sandboxes", query: q}, &out)
}

// GetSandbox shows a sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.json(ctx, request{method: "GET", path: "/v1/sandboxes/" + esc(id)}, &sb)
}

// StopSandbox stops a sandbox; its workspace stays.
func (c *Client) StopSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	return sb, c.json(ctx, request{method: "POST", path: "/v1/sandboxes/" + esc(id) + "/stop"}, &sb)
}

// RemoveSandbox removes a sandbox.
func (c *Client) RemoveSandbox(ctx context.Context, id string) error {
	return c.json(ctx, request{method: "DELETE", path: "/v1/sandboxes/" + esc(id)}, nil)
}

// Exec is a command to run.
type Exec struct {
	Argv           []string `json:"argv"`
	Env            []string `json:"env,omitempty"`
	Workdir        string   `json:"workdir,omitempty"`
	Timeout        string   `json:"timeout,omitempty"`
	MaxOutputBytes int64    `json:"max_output_bytes,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
}

// ExecResult is how a command ended.
type ExecResult struct {
	ExecID          string `json:"exec_id"`
	SandboxID       string `json:"sandbox_id"`
	Replaced        bool   `json:"replaced"`
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal,omitempty"`
	TimedOut        bool   `json:"timed_out"`
	Canceled        bool   `json:"canceled,omitempty"`
	Lost            bool   `json:"lost"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StderrBytes     int64  `json:"stderr_bytes"`
	DurationMS      int64  `json:"duration_ms"`
}

// Exec runs a command in target (a workspace or sandbox ID), streaming its
// output to stdout and stderr as it arrives.
func (c *Client) Exec(ctx context.Context, target string, req Exec, stdout, stderr io.Writer) (ExecResult, error) {
	var res ExecResult
	path := "/v1/workspaces/" + esc(target) + "/exec"
	if len(target) > 3 && target[:3] == "sb_" {
		path = "/v1/sandboxes/" + esc(target) + "/exec"
	}
	resp, err := c.do(ctx, request{method: "POST", path: path, body: req, accept: "application/x-ndjson"})
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var line struct {
			Stream  string          `json:"stream"`
			Data    string          `json:"data"`
			DataB64 string          `json:"data_b64"`
			Result  json.RawMessage `json:"result"`
			Error   *struct{ Code, Message string }
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return res, fmt.Errorf("decoding exec stream: %w", err)
		}
		switch {
		case line.Error != nil:
			return res, &Error{Code: line.Error.Code, Message: line.Error.Message}
		case line.Result != nil:
			return res, json.Unmarshal(line.Result, &res)
		case line.Stream != "":
			data := []byte(line.Data)
			if line.DataB64 != "" {
				if data, err = base64.StdEncoding.DecodeString(line.DataB64); err != nil {
					return res, fmt.Errorf("decoding exec output: %w", err)
				}
			}
			w := stdout
			if line.Stream == "stderr" {
				w = stderr
			}
			if w != nil {
				w.Write(data)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	return res, errors.New("the daemon closed the exec stream without a result")
}
