// Package mcpserver is agentbox's MCP surface: the tools a coding agent
// calls most (workspaces, commands, files, results), described for a model,
// with bounded output and progress for long commands.
//
// It is an adapter, like /v1: the tools decode their arguments, call a
// Backend and encode the answer, as text for the model and as structured
// output in the API's shapes. `agentbox mcp` serves them over stdio with a
// Backend over the Go client (ClientBackend); the daemon serves them as
// streamable HTTP at /mcp with a Backend over the manager
// (ManagerBackend). The package wraps the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) so that a bump touches it
// alone; it never reaches a sandbox backend, the store or the guest.
package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// Transport limits. A tool's own limits are below them (a write carries at
// most MaxWriteContent), so that what a model can send meets a tool error
// naming the limit, not a broken transport.
const (
	// MaxMessageBytes bounds one JSON-RPC message: a line on stdio, a
	// request body over HTTP.
	MaxMessageBytes = 32 << 20
	// HTTPSessionIdle ends an HTTP session that has seen no request for
	// this long (a client that went away without ending it).
	HTTPSessionIdle = 30 * time.Minute
)

// Options configure a Server.
type Options struct {
	// Version is reported to clients as the server's version.
	Version string
	// Logger receives the SDK's log lines; nil discards them.
	Logger *slog.Logger
}

// Server is the MCP server: the tool table over a Backend, and the
// sessions' state.
type Server struct {
	b    Backend
	dirs DirUploader // nil: create_workspace offers no from_dir
	mcp  *mcp.Server
	log  *slog.Logger

	// calls is the parent of every tool call's context: Abort ends it.
	calls context.Context
	abort context.CancelFunc

	mu sync.Mutex
	// defaults are the sessions' bound workspaces (use_workspace).
	defaults map[*mcp.ServerSession]string
}

// instructions tell a model what agentbox is and how the tools fit.
const instructions = `agentbox gives you durable workspaces (git checkouts, or scratch directories) and runs your commands in an isolated sandbox with the workspace mounted at /workspace: non-root, no credentials, and no network unless the sandbox's policy allows hosts. ` +
	`Start with create_workspace (from a repo URL, empty, or from files), or list_workspaces and use_workspace to pick one: the session then uses it whenever a call omits "workspace". ` +
	`Read and change files with read_file, write_file and edit_file; explore with list_files, find_files and grep; run builds and tests with run_command. ` +
	`When done, review with diff and check_diff, then commit. fork_workspace copies a workspace (N at once) so that attempts run side by side. ` +
	`Errors start with a code (not_found, invalid, conflict, too_large, policy_denied, unavailable, internal) and say what to fix.`

// New returns the MCP server of b. If b is also a DirUploader,
// create_workspace offers from_dir.
func New(b Backend, opts Options) *Server {
	s := &Server{b: b, log: opts.Logger, defaults: map[*mcp.ServerSession]string{}}
	s.calls, s.abort = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.dirs, _ = b.(DirUploader)
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "agentbox", Title: "agentbox", Version: version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.log,
		// Tools only: no logging capability to advertise.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, t := range tools {
		t.add(s)
	}
	return s
}

// Abort ends every tool call in progress, now and later: a running
// command is killed. The daemon calls it when its shutdown grace is over.
func (s *Server) Abort() { s.abort() }

// Tools lists the names of the tools served, in the table's order.
func Tools() []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.name
	}
	return names
}

// ServeStdio serves one session over in and out (newline-delimited
// JSON-RPC, as MCP's stdio transport) until the client closes in or ctx
// ends.
func (s *Server) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	err := s.mcp.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out, MaxLineLength: MaxMessageBytes})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// HTTPHandler serves MCP's streamable HTTP transport (POST, GET and
// DELETE on one path). It does no authentication of its own: mount it
// behind the API's.
type HTTPHandler struct {
	s *Server
	h *mcp.StreamableHTTPHandler

	mu sync.Mutex
	// posts counts each session's POSTs in progress: the requests that
	// carry its calls and, on their response stream, their answers.
	posts map[string]int
	// shutdown is set by Shutdown: a session ends once its POSTs have.
	shutdown bool
}

// HTTPHandler returns the streamable HTTP handler of s. Its sessions keep
// their state (the bound workspace) between requests.
func (s *Server) HTTPHandler() *HTTPHandler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		SessionTimeout:      HTTPSessionIdle,
		MaxRequestBodyBytes: MaxMessageBytes,
	})
	return &HTTPHandler{s: s, h: h, posts: map[string]int{}}
}

// sessionHeader names a request's session (MCP's streamable HTTP).
const sessionHeader = "Mcp-Session-Id"

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(sessionHeader)
	if r.Method != http.MethodPost || id == "" {
		h.h.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	h.posts[id]++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.posts[id]--
		last := h.posts[id] == 0
		if last {
			delete(h.posts, id)
		}
		end := last && h.shutdown
		h.mu.Unlock()
		if end {
			h.end(id)
		}
	}()
	h.h.ServeHTTP(w, r)
}

// Shutdown ends every session once it has answered the calls in progress
// (at once for most: a session is idle between calls), and with them the
// streams that would otherwise hold a graceful shutdown for its whole
// grace period: a session's GET stream ends only with the session. Abort
// the server to end the calls sooner.
func (h *HTTPHandler) Shutdown() {
	h.mu.Lock()
	h.shutdown = true
	busy := maps.Clone(h.posts)
	h.mu.Unlock()
	for ss := range h.s.mcp.Sessions() {
		if busy[ss.ID()] == 0 {
			go ss.Close()
		}
	}
}

// end closes the session id, if it is still there.
func (h *HTTPHandler) end(id string) {
	for ss := range h.s.mcp.Sessions() {
		if ss.ID() == id {
			// Close waits for calls the session took meanwhile.
			go ss.Close()
		}
	}
}

// bind makes ws the default workspace of session ss; "" unbinds.
func (s *Server) bind(ss *mcp.ServerSession, ws string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws == "" {
		delete(s.defaults, ss)
	} else {
		s.defaults[ss] = ws
	}
	// Forget the sessions that ended: the map holds the live ones.
	live := map[*mcp.ServerSession]bool{}
	for x := range s.mcp.Sessions() {
		live[x] = true
	}
	for x := range s.defaults {
		if !live[x] && x != ss {
			delete(s.defaults, x)
		}
	}
}

// bound is the default workspace of session ss, "" if none.
func (s *Server) bound(ss *mcp.ServerSession) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaults[ss]
}

// unbindEverywhere forgets ws as any session's default (it was removed).
func (s *Server) unbindEverywhere(ws string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for x, id := range s.defaults {
		if id == ws {
			delete(s.defaults, x)
		}
	}
}

// ErrorKey is the _meta key of a failed tool call's result that carries
// the agentbox error, {"code": ..., "message": ...}, as /v1 sends it.
const ErrorKey = "agentbox/error"

// errorResult is the tool result of a failed call: isError, the code and
// message as text for the model, and the same under _meta for programs.
// (Structured content is left out: it would have to match the tool's
// output schema, and clients check that it does.)
func errorResult(err error) *mcp.CallToolResult {
	code, msg := errdefs.Code(err), errdefs.Message(err)
	// A request that never reached the daemon (agentbox mcp while no
	// daemon runs) is unavailable: trying again later can work.
	var ue *url.Error
	if code == "internal" && errors.As(err, &ue) {
		code = "unavailable"
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + msg}},
		Meta:    mcp.Meta{ErrorKey: map[string]string{"code": code, "message": msg}},
	}
}
