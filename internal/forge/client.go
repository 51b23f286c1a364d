package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Bounds on what a forge may send back. A pull request or a list page is a
// few kilobytes; a list of 100 pull requests with long bodies stays well
// under maxBody. An error message is cut to maxMessage for the error text.
const (
	maxBody    = 8 << 20
	maxMessage = 512
)

// client is what the three forges share: one token, one base URL, one
// http.Client, and the rules for errors.
type client struct {
	kind   string
	apiURL string // "" means the default for the remote's host
	token  string
	http   *http.Client
}

// call is one API request. auth sets the credentials header; body, when
// not nil, is sent as JSON; out, when not nil, receives the JSON reply.
type call struct {
	method, path string // path is below the API root, with query if any
	body, out    any
	auth         func(h http.Header)
	headers      map[string]string
}

// do sends c to base+path and decodes a 2xx reply into c.out. Any other
// status becomes an *APIError naming the forge, repo, request and status.
func (cl *client) do(ctx context.Context, r Remote, base string, c call) error {
	var rd io.Reader
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return fmt.Errorf("%s %s: encoding %s %s: %w", cl.kind, r, c.method, pathOnly(c.path), err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %s %s: %w", cl.kind, r, c.method, pathOnly(c.path), err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "agentbox")
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	c.auth(req.Header)
	resp, err := cl.http.Do(req)
	if err != nil {
		// net/http's errors name the URL, never a header: no token here,
		// but redact anyway in case a caller's transport is chattier.
		return fmt.Errorf("%s %s: %s %s: %s: %w", cl.kind, r, c.method, pathOnly(c.path), cl.redact(err.Error()), errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("%s %s: %s %s: reading the reply: %s: %w", cl.kind, r, c.method, pathOnly(c.path), cl.redact(err.Error()), errdefs.ErrUnavailable)
	}
	if len(data) > maxBody {
		return fmt.Errorf("%s %s: %s %s: reply larger than %d bytes: %w", cl.kind, r, c.method, pathOnly(c.path), maxBody, errdefs.ErrTooLarge)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &APIError{
			Forge: cl.kind, Repo: r.String(), Method: c.method, Path: pathOnly(c.path),
			Status: resp.StatusCode, Message: cl.message(data),
		}
	}
	if c.out == nil {
		return nil
	}
	if err := json.Unmarshal(data, c.out); err != nil {
		return fmt.Errorf("%s %s: %s %s: decoding the reply: %v: %w", cl.kind, r, c.method, pathOnly(c.path), err, errdefs.ErrUnavailable)
	}
	return nil
}

// message pulls the forge's own words out of an error reply: GitHub and
// Gitea send {"message": ...} (GitHub adds "errors"), GitLab {"message"}
// or {"error"}. The result is one line, bounded, without the token.
func (cl *client) message(data []byte) string {
	var m struct {
		Message any             `json:"message"`
		Error   any             `json:"error"`
		Errors  json.RawMessage `json:"errors"`
	}
	var s string
	if json.Unmarshal(data, &m) == nil {
		parts := []string{}
		for _, v := range []any{m.Message, m.Error} {
			switch v := v.(type) {
			case nil:
			case string:
				parts = append(parts, v)
			default:
				b, _ := json.Marshal(v)
				parts = append(parts, string(b))
			}
		}
		if len(m.Errors) > 0 && string(m.Errors) != "null" {
			parts = append(parts, string(m.Errors))
		}
		s = strings.Join(parts, ": ")
	} else {
		s = string(data)
	}
	s = strings.Join(strings.Fields(cl.redact(s)), " ")
	if len(s) > maxMessage {
		s = s[:maxMessage]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "..."
	}
	return s
}

// redact removes the token from text a server or transport produced.
func (cl *client) redact(s string) string {
	if cl.token == "" {
		return s
	}
	return strings.ReplaceAll(s, cl.token, "[REDACTED]")
}

// pathOnly drops the query: it may carry a branch name, and the path is
// enough to say which request failed.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}
