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
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// Limits are a sandbox's hard limits; zero fields take the daemon's
// defaults.
type Limits = apitypes.SandboxLimits

// CreateSandbox asks for a sandbox on a workspace. Policy is a policy
// document as JSON (see agentbox policy check, and Policy); nil means the
// default: no network.
type CreateSandbox = apitypes.SandboxRequest

// Sandbox is an execution environment attached to a workspace.
type Sandbox = apitypes.Sandbox

// Policy is a sandbox's policy document; marshal one into
// CreateSandbox.Policy.
type Policy = apitypes.Policy

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
	var out apitypes.SandboxList
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

// Exec is a command to run: Argv, or a shell command line in Sh.
type Exec = apitypes.ExecRequest

// ExecResult is how a command ended.
type ExecResult = apitypes.ExecResult

// ExecOutput is a buffered exec's reply: how the command ended and its
// output.
type ExecOutput = apitypes.ExecOutput

// execPath is the exec endpoint of target (a workspace or sandbox ID).
func execPath(target, op string) string {
	if len(target) > 3 && target[:3] == "sb_" {
		return "/v1/sandboxes/" + esc(target) + "/" + op
	}
	return "/v1/workspaces/" + esc(target) + "/" + op
}

// Exec runs a command in target (a workspace or sandbox ID), streaming its
// output to stdout and stderr as it arrives. req.Stdin is the command's
// whole input; ExecStdin streams it instead.
func (c *Client) Exec(ctx context.Context, target string, req Exec, stdout, stderr io.Writer) (ExecResult, error) {
	resp, err := c.do(ctx, request{method: "POST", path: execPath(target, "exec"), body: req, accept: "application/x-ndjson"})
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	return readExecStream(resp.Body, stdout, stderr)
}

// ExecStdin runs a command like Exec while streaming stdin to it as it is
// read: the request and the reply are one full-duplex HTTP exchange, so a
// command can answer each line of its input before the next is sent. The
// command sees the end of its input when stdin returns io.EOF; another
// error from stdin kills the command. req.Stdin must be empty.
//
// ExecStdin returns when the command has ended; it does not wait for a Read
// of stdin that is still blocked then (that Read's data is dropped).
func (c *Client) ExecStdin(ctx context.Context, target string, req Exec, stdin io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	if req.Stdin != "" {
		return ExecResult{}, fmt.Errorf("exec: Stdin is set and a stdin stream is given: %w", ErrInvalid)
	}
	first, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, err
	}
	pr, pw := io.Pipe()
	defer pr.CloseWithError(errExecDone)
	go pumpStdin(pw, append(first, '\n'), stdin)
	resp, err := c.do(ctx, request{method: "POST", path: execPath(target, "exec"), raw: pr, rawType: "application/x-ndjson", accept: "application/x-ndjson"})
	if err != nil {
		return ExecResult{}, err
	}
	defer resp.Body.Close()
	return readExecStream(resp.Body, stdout, stderr)
}

// ExecBuffered runs a command in target and returns, once it has ended,
// its output (each stream within req.MaxOutputBytes, default 1 MiB, at
// most 16 MiB) and how it ended, in one reply. stdin, when not nil,
// streams to the command as in ExecStdin; otherwise req.Stdin is its
// input.
func (c *Client) ExecBuffered(ctx context.Context, target string, req Exec, stdin io.Reader) (ExecOutput, error) {
	var out ExecOutput
	if stdin == nil {
		return out, c.json(ctx, request{method: "POST", path: execPath(target, "exec"), body: req, accept: "application/json"}, &out)
	}
	if req.Stdin != "" {
		return out, fmt.Errorf("exec: Stdin is set and a stdin stream is given: %w", ErrInvalid)
	}
	first, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	pr, pw := io.Pipe()
	defer pr.CloseWithError(errExecDone)
	go pumpStdin(pw, append(first, '\n'), stdin)
	return out, c.json(ctx, request{method: "POST", path: execPath(target, "exec"), raw: pr, rawType: "application/x-ndjson", accept: "application/json"}, &out)
}

var errExecDone = errors.New("the exec ended")

// stdinChunk is the most input one stdin line carries.
const stdinChunk = 32 << 10

// pumpStdin writes the request line, then stdin as stdin lines, to pw.
func pumpStdin(pw *io.PipeWriter, first []byte, stdin io.Reader) {
	if _, err := pw.Write(first); err != nil {
		return
	}
	buf := make([]byte, stdinChunk)
	var line []byte
	for {
		n, rerr := stdin.Read(buf)
		if n > 0 {
			line = line[:0]
			if utf8.Valid(buf[:n]) {
				line = append(line, `{"stdin":`...)
				b, _ := json.Marshal(string(buf[:n]))
				line = append(line, b...)
			} else {
				line = append(line, `{"stdin_b64":"`...)
				line = base64.StdEncoding.AppendEncode(line, buf[:n])
				line = append(line, '"')
			}
			line = append(line, "}\n"...)
			if _, err := pw.Write(line); err != nil {
				return // the exec ended
			}
		}
		if errors.Is(rerr, io.EOF) {
			pw.Write([]byte(`{"stdin_eof":true}` + "\n"))
			pw.Close()
			return
		}
		if rerr != nil {
			pw.CloseWithError(fmt.Errorf("reading stdin: %w", rerr))
			return
		}
	}
}

// readExecStream reads an exec's NDJSON reply to its result.
func readExecStream(body io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	var res ExecResult
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var line apitypes.ExecLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return res, fmt.Errorf("decoding exec stream: %w", err)
		}
		switch {
		case line.Error != nil:
			return res, &Error{Code: line.Error.Code, Message: line.Error.Message}
		case line.Result != nil:
			return *line.Result, nil
		case line.Stream != "":
			data := []byte(line.Data)
			if line.DataB64 != "" {
				var err error
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

// SecretInfo names a stored secret; its value is never returned.
type SecretInfo = apitypes.SecretInfo

// SetSecret stores a secret's value in the daemon, sealed.
func (c *Client) SetSecret(ctx context.Context, name, value string) error {
	return c.json(ctx, request{method: "PUT", path: "/v1/secrets/" + esc(name), body: apitypes.SecretRequest{Value: value}}, nil)
}

// ListSecrets lists the secrets' names.
func (c *Client) ListSecrets(ctx context.Context) ([]SecretInfo, error) {
	var out apitypes.SecretList
	return out.Secrets, c.json(ctx, request{method: "GET", path: "/v1/secrets"}, &out)
}

// RemoveSecret deletes a secret.
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.json(ctx, request{method: "DELETE", path: "/v1/secrets/" + esc(name)}, nil)
}

// Node is a daemon sharing the store.
type Node = apitypes.Node

// ListNodes lists the daemons sharing the daemon's store.
func (c *Client) ListNodes(ctx context.Context) ([]Node, error) {
	var out apitypes.NodeList
	return out.Nodes, c.json(ctx, request{method: "GET", path: "/v1/nodes"}, &out)
}
