package api

import (
	"net/http"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// route is one entry of the API: its pattern, its handler, and what the
// OpenAPI document says of it.
type route struct {
	method, path string
	handler      func(*Server, http.ResponseWriter, *http.Request)
	op           Op
}

// Bodies and replies several routes share.
var (
	workspaceReply = []Reply{jsonReply(201, "the workspace", apitypes.Workspace{})}
	removedReply   = ok(apitypes.Removed{})
	sandboxReply   = ok(apitypes.Sandbox{})
	repoStream     = []Reply{{Status: 200, Description: "the repo; with Accept: application/x-ndjson, git's progress lines and then the result (or an error) as they come",
		Content: []Content{{Type: jsonType, Value: apitypes.RepoResult{}}, {Type: ndjsonType, Value: apitypes.RepoProgress{}, Stream: true}}}}
	execBody = []Content{
		{Type: jsonType, Value: apitypes.ExecRequest{}, Description: "the command; stdin is its whole input"},
		{Type: ndjsonType, AnyOf: []any{apitypes.ExecRequest{}, apitypes.StdinLine{}}, Stream: true,
			Description: "the first line is an ExecRequest (without stdin); every line after it is a StdinLine, streamed to the command while its output streams back (full duplex)"},
	}
	execReply = []Reply{{Status: 200,
		Description: "Accept: application/json waits for the command's end and answers one ExecOutput (a buffered exec). Otherwise the output streams as it comes: NDJSON ExecLine lines (the last one holds the result or an error), or with Accept: text/event-stream the events stdout, stderr, result and error",
		Content: []Content{
			{Type: jsonType, Value: apitypes.ExecOutput{}},
			{Type: ndjsonType, Value: apitypes.ExecLine{}, Stream: true},
			{Type: sseType, Events: []Event{{"stdout", apitypes.ExecChunk{}}, {"stderr", apitypes.ExecChunk{}}, {"result", apitypes.ExecResult{}}, {"error", apitypes.ErrorDetail{}}}},
		}}}
	shellParams = []Param{
		{Name: "argv", Description: "the command and its arguments, one parameter each; default /bin/sh", Repeated: true},
		{Name: "env", Description: "KEY=VALUE, one parameter each: the command's whole environment beyond the sandbox's", Repeated: true},
		q("workdir", "working directory, default /workspace"),
		{Name: "rows", Description: "the terminal's first size, default 24x80", Type: "integer"},
		{Name: "cols", Description: "the terminal's first size, default 24x80", Type: "integer"},
	}
	shellReply = []Reply{{Status: 101,
		Description: "the connection becomes a WebSocket: binary messages carry the terminal's bytes both ways, text messages are ShellControl documents (the client sends resize; the server sends started, error and exit)"}}
)

// mcpDoc says what /mcp is; its messages are MCP's (JSON-RPC 2.0), not
// this document's.
const mcpDoc = "The tools of `agentbox mcp` over MCP's streamable HTTP transport (protocol 2025-11-25 and earlier), served by the daemon over its manager. " +
	"A session starts with an initialize request without an Mcp-Session-Id header; the reply's Mcp-Session-Id header names it in every later request, and the session keeps its state (its default workspace) until a DELETE or 30 idle minutes. " +
	"The bodies are JSON-RPC 2.0 messages of the MCP specification. Same listeners and authentication as /v1; 404 when the daemon serves no MCP endpoint."

// forwardOp documents a method of the forwarding to a sandbox's port:
// the reply is whatever the sandbox's server sends.
func forwardOp(id string) Op {
	return Op{ID: id, Tag: "ports",
		Summary:     "Forward an HTTP request (WebSocket upgrades too) to a port of a running sandbox, through its guest; published or not",
		Description: "The request goes on as it came but for its path (what follows the port) and its Authorization header, which is the daemon's and never reaches the sandbox. 503 when nothing listens on the port.",
		Body:        []Content{{Type: binaryType, Description: "the request's body, as the sandbox's server takes it"}}, BodyOptional: true,
		Replies: []Reply{{Status: 200, Description: "what the sandbox's server answers, with its own status and media type", Content: []Content{{Type: binaryType}}}}}
}

// routes is the whole API. The mux serves exactly these, and openapi.json
// is generated from them (go generate ./internal/api).
var routes = []route{
	{"GET", "/v1/health", (*Server).health, Op{ID: "health", Tag: "daemon", Summary: "Check that the daemon answers; its version and workspace driver", Replies: ok(apitypes.Health{})}},
	{"GET", "/v1/openapi.json", (*Server).openapi, Op{ID: "openapi", Tag: "daemon", Summary: "This document (OpenAPI 3.0)", Replies: []Reply{{Status: 200, Description: "the OpenAPI document", Content: []Content{{Type: jsonType, Value: map[string]any{}}}}}}},
	{"GET", "/metrics", (*Server).metrics, Op{ID: "metrics", Tag: "daemon", Summary: "Prometheus metrics (404 when the daemon serves none)", Replies: []Reply{{Status: 200, Description: "metrics in the Prometheus text format", Content: []Content{{Type: textType}}}}}},
	{"POST", "/mcp", (*Server).mcp, Op{ID: "mcpPost", Tag: "mcp", Summary: "MCP (streamable HTTP): send one JSON-RPC message of a session", Description: mcpDoc,
		Body: []Content{{Type: jsonType, Value: map[string]any{}, Description: "one JSON-RPC message (a request, notification or response)"}},
		Replies: []Reply{
			{Status: 200, Description: "the response to a request, as one JSON document or, as the Accept header allows, a stream of the messages that lead to it (progress notifications) and the response",
				Content: []Content{{Type: jsonType, Value: map[string]any{}}, {Type: sseType, Events: []Event{{"message", map[string]any{}}}}}},
			{Status: 202, Description: "a notification or response was taken"},
		}}},
	{"GET", "/mcp", (*Server).mcp, Op{ID: "mcpGet", Tag: "mcp", Summary: "MCP (streamable HTTP): a session's stream of messages from the server", Description: mcpDoc,
		Replies: []Reply{{Status: 200, Description: "the session's server-sent messages, until it ends", Content: []Content{{Type: sseType, Events: []Event{{"message", map[string]any{}}}}}}}}},
	{"DELETE", "/mcp", (*Server).mcp, Op{ID: "mcpDelete", Tag: "mcp", Summary: "MCP (streamable HTTP): end a session", Description: mcpDoc,
		Replies: []Reply{{Status: 204, Description: "the session ended"}}}},

	{"POST", "/v1/repos", (*Server).addRepo, Op{ID: "addRepo", Tag: "repos", Summary: "Cache a remote: clone it once (201), or find it cached (200)",
		Body: jsonBody(apitypes.AddRepoRequest{}),
		Replies: []Reply{
			{Status: 201, Description: "cloned now", Content: jsonBody(apitypes.RepoResult{})},
			{Status: 200, Description: "already cached; with Accept: application/x-ndjson (whether cloned or not), git's progress lines and then the result (or an error) as they come",
				Content: []Content{{Type: jsonType, Value: apitypes.RepoResult{}}, {Type: ndjsonType, Value: apitypes.RepoProgress{}, Stream: true}}},
		}}},
	{"GET", "/v1/repos", (*Server).listRepos, Op{ID: "listRepos", Tag: "repos", Summary: "List cached repos", Replies: ok(apitypes.RepoList{})}},
	{"GET", "/v1/repos/{id}", (*Server).getRepo, Op{ID: "getRepo", Tag: "repos", Summary: "Show a repo by ID or URL", Replies: ok(apitypes.Repo{})}},
	{"POST", "/v1/repos/{id}/fetch", (*Server).fetchRepo, Op{ID: "fetchRepo", Tag: "repos", Summary: "Bring a cached repo up to date from its remote",
		Body: jsonBody(apitypes.FetchRepoRequest{}), BodyOptional: true, Replies: repoStream}},
	{"DELETE", "/v1/repos/{id}", (*Server).removeRepo, Op{ID: "removeRepo", Tag: "repos", Summary: "Remove a cached repo (refused while workspaces use it, unless force)",
		Params: []Param{qbool("force", "remove the repo's workspaces too")}, Replies: removedReply}},

	{"POST", "/v1/workspaces", (*Server).createWorkspace, Op{ID: "createWorkspace", Tag: "workspaces",
		Summary:     "Make a workspace: of a repo at a ref, empty, or from an uploaded directory",
		Description: "A JSON body makes a workspace of a repo (added to the cache if it is a URL) or, with empty, a fresh repository with one empty commit. A tar stream (application/x-tar, or gzipped: application/gzip) uploads a directory tree that becomes the workspace's base commit; its options are then the query parameters. The daemon refuses uploads holding absolute names, '..', entries under a symlink, hard links, devices, FIFOs, .git, or more than its limits.",
		Params: []Param{
			q("branch", "upload only: the workspace's own branch"), q("task", "upload only: a task label"),
			q("driver", "upload only: overlay or copy"), q("disk", `upload only: the disk quota, as "2G"`),
		},
		Body: []Content{
			{Type: jsonType, Value: apitypes.CreateWorkspaceRequest{}},
			{Type: tarType, Description: "a tar stream of the directory tree"},
			{Type: gzipType, Description: "a gzipped tar stream of the directory tree"},
		},
		Replies: workspaceReply}},
	{"GET", "/v1/workspaces", (*Server).listWorkspaces, Op{ID: "listWorkspaces", Tag: "workspaces", Summary: "List workspaces, of one repo or task",
		Params: []Param{q("repo", "a repo ID or URL"), q("task", "a task label")}, Replies: ok(apitypes.WorkspaceList{})}},
	{"GET", "/v1/workspaces/{id}", (*Server).getWorkspace, Op{ID: "getWorkspace", Tag: "workspaces", Summary: "Show a workspace", Replies: ok(apitypes.Workspace{})}},
	{"DELETE", "/v1/workspaces/{id}", (*Server).removeWorkspace, Op{ID: "removeWorkspace", Tag: "workspaces", Summary: "Remove a workspace, its sandboxes and its files", Replies: removedReply}},
	{"GET", "/v1/workspaces/{id}/status", (*Server).status, Op{ID: "workspaceStatus", Tag: "workspaces", Summary: "The paths changed since the base commit, and the disk quota's usage", Replies: ok(apitypes.Status{})}},
	{"GET", "/v1/workspaces/{id}/diff", (*Server).diff, Op{ID: "workspaceDiff", Tag: "workspaces", Summary: "The unified diff from the base commit, of every path or of some",
		Params: []Param{{Name: "path", Description: "limit the diff to these paths", Repeated: true},
			q("format", "unified (the default), or patch: an mbox of git format-patch messages from the base, the branch's commits then the uncommitted change (no paths)")},
		Replies: ok(apitypes.Diff{})}},
	{"POST", "/v1/workspaces/{id}/candidates", (*Server).review, Op{ID: "review", Tag: "review",
		Summary: "Make a candidate of the workspace: its files as a commit, with evidence agentbox gathers (tests and regression in fresh sandboxes, the diff check, stats), blocked or ready",
		Body:    jsonBody(apitypes.ReviewRequest{}), BodyOptional: true, Replies: []Reply{jsonReply(201, "the candidate", apitypes.Candidate{})}}},
	{"GET", "/v1/workspaces/{id}/candidates", (*Server).listCandidates, Op{ID: "listCandidates", Tag: "review",
		Summary: "The workspace's candidates, newest first", Replies: ok(apitypes.CandidateList{})}},
	{"GET", "/v1/candidates/{id}", (*Server).getCandidate, Op{ID: "getCandidate", Tag: "review",
		Summary: "A candidate with its evidence", Replies: ok(apitypes.Candidate{})}},
	{"POST", "/v1/candidates/{id}/approve", (*Server).approveCandidate, Op{ID: "approveCandidate", Tag: "review",
		Summary: "Approve a ready candidate (a blocked one is refused with its findings), with a reason",
		Body:    jsonBody(apitypes.DecisionRequest{}), Replies: ok(apitypes.Candidate{})}},
	{"POST", "/v1/candidates/{id}/reject", (*Server).rejectCandidate, Op{ID: "rejectCandidate", Tag: "review",
		Summary: "Reject a candidate, with a reason", Body: jsonBody(apitypes.DecisionRequest{}), Replies: ok(apitypes.Candidate{})}},
	{"POST", "/v1/workspaces/{id}/push", (*Server).push, Op{ID: "push", Tag: "review",
		Summary: "Push the newest approved candidate from the host to the repo's remote on agentbox/<task>/<workspace>: never forced, never to the default or a protected branch",
		Replies: ok(apitypes.Candidate{})}},
	{"POST", "/v1/workspaces/{id}/pr", (*Server).pullRequest, Op{ID: "pullRequest", Tag: "review",
		Summary: "Push the newest approved candidate, then open (or update) its pull request on the forge bound to the remote's host, with the evidence as its body",
		Replies: ok(apitypes.Candidate{})}},
	{"POST", "/v1/solve", (*Server).startSolve, Op{ID: "startSolve", Tag: "solve",
		Summary: "Start the agent loop on a repository and a task: plan, edit through the file tools, run the test in a sandbox, diagnose, retry, in K forks side by side, until the tests pass or a budget or the circuit breaker stops it; each attempt ends as a candidate from the review gate, never merged or pushed. The daemon runs it: it outlives the client and resumes after a restart",
		Body:    jsonBody(apitypes.SolveRequest{}), Replies: []Reply{jsonReply(201, "the run, started", apitypes.SolveRun{})}}},
	{"GET", "/v1/solve", (*Server).listSolve, Op{ID: "listSolve", Tag: "solve", Summary: "The runs of the agent loop, newest first",
		Replies: ok(apitypes.SolveRunList{})}},
	{"GET", "/v1/solve/{id}", (*Server).getSolve, Op{ID: "getSolve", Tag: "solve", Summary: "A run: its state, attempts (stop reason, usage, failure categories, candidate) and best candidate",
		Replies: ok(apitypes.SolveRun{})}},
	{"GET", "/v1/solve/{id}/steps", (*Server).solveSteps, Op{ID: "solveSteps", Tag: "solve", Summary: "A run's recorded steps in order: plan, patches, executions (redacted, bounded output), diagnoses, stops, reviews",
		Replies: ok(apitypes.SolveStepList{})}},
	{"POST", "/v1/solve/{id}/cancel", (*Server).cancelSolve, Op{ID: "cancelSolve", Tag: "solve", Summary: "Cancel a running run: its loops stop, no candidate is made, the workspaces stay",
		Replies: ok(apitypes.SolveRun{})}},
	{"GET", "/v1/forges", (*Server).listForges, Op{ID: "listForges", Tag: "review", Summary: "The forge bindings: host, API kind, the secret holding the token",
		Replies: ok(apitypes.ForgeList{})}},
	{"PUT", "/v1/forges/{host}", (*Server).setForge, Op{ID: "setForge", Tag: "review", Summary: "Bind a forge host to its API kind and a stored secret with its token",
		Body: jsonBody(apitypes.ForgeBinding{}), Replies: ok(apitypes.ForgeBinding{})}},
	{"DELETE", "/v1/forges/{host}", (*Server).removeForge, Op{ID: "removeForge", Tag: "review", Summary: "Drop a forge binding (the secret stays)",
		Replies: removedReply}},
	{"GET", "/v1/workspaces/{id}/bundle", (*Server).bundle, Op{ID: "workspaceBundle", Tag: "workspaces",
		Summary: "A git bundle of the workspace's branch from the base commit (its prerequisite), the uncommitted change as one more commit; the branch in the Agentbox-Branch header",
		Replies: []Reply{{Status: 200, Description: "the bundle", Content: []Content{{Type: binaryType}}}}}},
	{"POST", "/v1/workspaces/{id}/diff/check", (*Server).checkDiff, Op{ID: "checkDiff", Tag: "workspaces",
		Summary: "Check the result before it leaves: changed paths outside the policy's writable paths, added lines that look like secrets (200 whatever it finds)",
		Body:    jsonBody(apitypes.DiffCheckRequest{}), BodyOptional: true, Replies: ok(apitypes.DiffReport{})}},
	{"POST", "/v1/workspaces/{id}/commit", (*Server).commit, Op{ID: "commit", Tag: "workspaces", Summary: "Commit every change on the workspace's branch",
		Body: jsonBody(apitypes.CommitRequest{}), Replies: ok(apitypes.CommitResult{})}},
	{"POST", "/v1/workspaces/{id}/dependencies", (*Server).addDependency, Op{ID: "addDependency", Tag: "workspaces",
		Summary:     "Admit a package into the workspace: checked against the operator's approved manifest (exact version, digest, pinned source), fetched by the daemon through the egress checks, verified, written under .agentbox/deps/ to be installed offline",
		Description: "403 (policy_denied) names the package and the reason: not in the manifest, a version that is not pinned (a range or a tag), a version not approved, or an artifact whose digest is not the approved one (nothing is written). The sandbox's network is unchanged. Both outcomes are recorded in the event log (dependency.admitted, dependency.denied).",
		Body:        jsonBody(apitypes.DependencyRequest{}), Replies: ok(apitypes.Dependency{})}},
	{"POST", "/v1/workspaces/{id}/fork", (*Server).fork, Op{ID: "forkWorkspace", Tag: "workspaces", Summary: "Copy a workspace (only its own changes) onto a new branch",
		Body: jsonBody(apitypes.ForkRequest{}), BodyOptional: true, Replies: workspaceReply}},
	{"POST", "/v1/workspaces/{id}/forks", (*Server).forks, Op{ID: "forkWorkspaces", Tag: "workspaces",
		Summary: "Make count copies of a workspace at once (1 to 16), all or none; with a branch, fork i is on BRANCH-i",
		Body:    jsonBody(apitypes.ForksRequest{}), Replies: []Reply{jsonReply(201, "the forks", apitypes.ForkList{})}}},

	{"GET", "/v1/workspaces/{id}/files", (*Server).readFile, Op{ID: "readFile", Tag: "files",
		Summary: "Read a file, or the range of it that lines or bytes selects: raw bytes, or with Accept: application/json one FileContent document (lines numbered)",
		Params: []Param{qpath("path relative to the workspace root"),
			q("lines", "FIRST:LAST (1-based, inclusive), FIRST:, :LAST or LINE; a range may be read from a file of any size"),
			q("bytes", "OFFSET:LENGTH, or OFFSET: to the end")},
		Replies: []Reply{{Status: 200, Description: "the content",
			Content: []Content{{Type: binaryType}, {Type: jsonType, Value: apitypes.FileContent{}}}}}}},
	{"PUT", "/v1/workspaces/{id}/files", (*Server).writeFile, Op{ID: "writeFile", Tag: "files", Summary: "Write a file atomically; durable before the reply",
		Params: []Param{qpath("path relative to the workspace root"),
			q("mode", "octal permissions; default: an existing file's, else 0644"),
			qbool("parents", "make missing directories")},
		Body: []Content{{Type: binaryType, Description: "the file's content"}}, BodyOptional: true, Replies: ok(apitypes.FileInfo{})}},
	{"DELETE", "/v1/workspaces/{id}/files", (*Server).removeFile, Op{ID: "removeFile", Tag: "files", Summary: "Remove a file or directory",
		Params:  []Param{qpath("path relative to the workspace root"), qbool("recursive", "remove a directory that is not empty")},
		Replies: ok(apitypes.FileRemoved{})}},
	{"GET", "/v1/workspaces/{id}/files/stat", (*Server).statFile, Op{ID: "statFile", Tag: "files", Summary: "Describe a path (a symlink is not followed)",
		Params: []Param{qpath("path relative to the workspace root")}, Replies: ok(apitypes.FileInfo{})}},
	{"GET", "/v1/workspaces/{id}/files/list", (*Server).listFiles, Op{ID: "listFiles", Tag: "files", Summary: "List a directory and, down to depth levels, what is inside it",
		Params:  []Param{q("path", "the directory, default the root"), {Name: "depth", Description: "levels listed, 1 (default) to 256: 1 is the directory's own entries", Type: "integer"}},
		Replies: ok(apitypes.FileList{})}},
	{"POST", "/v1/workspaces/{id}/files/mkdir", (*Server).mkdir, Op{ID: "mkdir", Tag: "files", Summary: "Make a directory",
		Body: jsonBody(apitypes.MkdirRequest{}), Replies: ok(apitypes.FileInfo{})}},
	{"POST", "/v1/workspaces/{id}/files/rename", (*Server).rename, Op{ID: "rename", Tag: "files", Summary: "Move a path within the workspace",
		Body: jsonBody(apitypes.RenameRequest{}), Replies: ok(apitypes.RenameRequest{})}},
	{"POST", "/v1/workspaces/{id}/files/grep", (*Server).grep, Op{ID: "grep", Tag: "files", Summary: "Search file contents with a regular expression, bounded",
		Body: jsonBody(apitypes.GrepRequest{}), Replies: ok(apitypes.GrepResult{})}},
	{"POST", "/v1/workspaces/{id}/files/edit", (*Server).editFile, Op{ID: "editFile", Tag: "files",
		Summary: "Replace exact text in a file: it must occur exactly once unless all; otherwise nothing changes and the error (409) quotes the nearest lines",
		Body:    jsonBody(apitypes.EditRequest{}), Replies: ok(apitypes.EditResult{})}},
	{"POST", "/v1/workspaces/{id}/files/find", (*Server).findFiles, Op{ID: "findFiles", Tag: "files", Summary: "Find paths by glob (* ? [...] within a name, ** across directories)",
		Body: jsonBody(apitypes.FindRequest{}), Replies: ok(apitypes.FindResult{})}},

	{"POST", "/v1/sandboxes", (*Server).createSandbox, Op{ID: "createSandbox", Tag: "sandboxes", Summary: "Start a sandbox on a workspace, with limits and a policy",
		Body: jsonBody(apitypes.SandboxRequest{}), Replies: created(apitypes.Sandbox{})}},
	{"GET", "/v1/sandboxes", (*Server).listSandboxes, Op{ID: "listSandboxes", Tag: "sandboxes", Summary: "List sandboxes, of one workspace",
		Params: []Param{q("workspace", "a workspace ID")}, Replies: ok(apitypes.SandboxList{})}},
	{"GET", "/v1/sandboxes/{id}", (*Server).getSandbox, Op{ID: "getSandbox", Tag: "sandboxes", Summary: "Show a sandbox", Replies: sandboxReply}},
	{"POST", "/v1/sandboxes/{id}/stop", (*Server).stopSandbox, Op{ID: "stopSandbox", Tag: "sandboxes", Summary: "Stop a sandbox; its workspace stays", Replies: sandboxReply}},
	{"DELETE", "/v1/sandboxes/{id}", (*Server).removeSandbox, Op{ID: "removeSandbox", Tag: "sandboxes", Summary: "Remove a sandbox", Replies: removedReply}},
	{"POST", "/v1/sandboxes/{id}/exec", (*Server).exec, Op{ID: "execSandbox", Tag: "exec", Summary: "Run a command in a sandbox",
		Body: execBody, Replies: execReply}},
	{"POST", "/v1/workspaces/{id}/exec", (*Server).exec, Op{ID: "execWorkspace", Tag: "exec",
		Summary: "Run a command in the workspace's sandbox, started if there is none; a sandbox that is gone is replaced (replaced: true)",
		Body:    execBody, Replies: execReply}},
	{"GET", "/v1/sandboxes/{id}/shell", (*Server).shell, Op{ID: "shellSandbox", Tag: "exec", Summary: "An interactive command on a terminal, over a WebSocket",
		Params: shellParams, Replies: shellReply}},
	{"GET", "/v1/workspaces/{id}/shell", (*Server).shell, Op{ID: "shellWorkspace", Tag: "exec", Summary: "An interactive command on a terminal in the workspace's sandbox, over a WebSocket",
		Params: shellParams, Replies: shellReply}},

	{"POST", "/v1/workspaces/{id}/processes", (*Server).startProcess, Op{ID: "startProcess", Tag: "processes",
		Summary:     "Start a background process in the workspace's sandbox (started or replaced as for exec): it runs on after the reply, until it exits, is killed or its sandbox stops",
		Description: "{id} may also be a sandbox ID, standing for its workspace. The command has no output cap of its own: the daemon keeps the last ring_bytes (1 MiB) of each of its stdout and stderr. stdin is its first input (at most 1 MiB). With tty the command runs on a terminal of cols x rows (default 80x24): everything it shows is its stdout, input is typed into the terminal, and /resize changes its size.",
		Body:        jsonBody(apitypes.ExecRequest{}), Replies: created(apitypes.Process{})}},
	{"GET", "/v1/workspaces/{id}/processes", (*Server).listProcesses, Op{ID: "listProcesses", Tag: "processes",
		Summary: "List the workspace's background processes this daemon holds, running and the last ended, newest first", Replies: ok(apitypes.ProcessList{})}},
	{"GET", "/v1/workspaces/{id}/processes/{pid}", (*Server).getProcess, Op{ID: "getProcess", Tag: "processes", Summary: "Show a background process", Replies: ok(apitypes.Process{})}},
	{"GET", "/v1/workspaces/{id}/processes/{pid}/logs", (*Server).processLogs, Op{ID: "processLogs", Tag: "processes",
		Summary:     "Read one output stream of a process from an offset; with follow, stream it until the process ends",
		Description: "Bytes older than the ring's are gone: a read from before them starts at the oldest kept and says how many were dropped. With follow=true the reply is NDJSON: ProcessLogs lines as the process writes (an empty line is a keepalive), the last one carrying the ended process.",
		Params: []Param{
			q("stream", "stdout (default) or stderr"),
			{Name: "offset", Description: "the stream offset to read from; negative counts from the end", Type: "integer"},
			{Name: "limit", Description: "the most bytes returned (default and most 1 MiB)", Type: "integer"},
			qbool("follow", "stream the output as it comes until the process ends"),
		},
		Replies: []Reply{{Status: 200, Description: "the slice read; with follow, a stream of them",
			Content: []Content{{Type: jsonType, Value: apitypes.ProcessLogs{}}, {Type: ndjsonType, Value: apitypes.ProcessLogs{}, Stream: true}}}}}},
	{"GET", "/v1/workspaces/{id}/execs", (*Server).listLiveExecs, Op{ID: "listLiveExecs", Tag: "exec",
		Summary:     "The workspace's ordinary execs (not background processes) this daemon runs, and the last ended, newest first; with follow, a stream of them as they start and end",
		Description: "The daemon keeps the last ring_bytes (256 KiB) of each stream of each such exec, for at most 128 execs at once (running ones first; an exec started when all are taken keeps none: ring_bytes 0), and the last 64 ended. With follow=true the reply is NDJSON: each exec listed (oldest first), then each that starts or ends, until the client leaves (an empty line is a keepalive).",
		Params:      []Param{qbool("follow", "stream the execs as they start and end")},
		Replies:     []Reply{{Status: 200, Description: "the execs; with follow, a stream of them", Content: []Content{{Type: jsonType, Value: apitypes.LiveExecList{}}, {Type: ndjsonType, Value: apitypes.LiveExec{}, Stream: true}}}}}},
	{"GET", "/v1/execs/{id}/output", (*Server).liveExecOutput, Op{ID: "liveExecOutput", Tag: "exec",
		Summary:     "Read one output stream of an ordinary exec, running or recently ended, from an offset; with follow, stream it until the exec ends. Any authorised client may, not only the one whose request runs it",
		Description: "As a process's logs: bytes older than the ring's are gone, and a read from before them starts at the oldest kept and says how many were dropped. With follow=true the reply is NDJSON: ProcessLogs lines as the exec writes (an empty line is a keepalive), the last one carrying the ended exec. 404 for an exec this daemon holds no output of (a background process: read its logs).",
		Params: []Param{
			q("stream", "stdout (default) or stderr"),
			{Name: "offset", Description: "the stream offset to read from; negative counts from the end", Type: "integer"},
			{Name: "limit", Description: "the most bytes returned (default and most 256 KiB)", Type: "integer"},
			qbool("follow", "stream the output as it comes until the exec ends"),
		},
		Replies: []Reply{{Status: 200, Description: "the slice read; with follow, a stream of them",
			Content: []Content{{Type: jsonType, Value: apitypes.ProcessLogs{}}, {Type: ndjsonType, Value: apitypes.ProcessLogs{}, Stream: true}}}}}},
	{"POST", "/v1/workspaces/{id}/processes/{pid}/stdin", (*Server).processStdin, Op{ID: "processStdin", Tag: "processes",
		Summary: "Write to a process's input (at most 1 MiB a write), and close it; a command that does not read makes the write give up after 10s (409, saying how much was queued)",
		Body:    jsonBody(apitypes.ProcessStdin{}), Replies: ok(apitypes.ProcessStdinResult{})}},
	{"POST", "/v1/workspaces/{id}/processes/{pid}/signal", (*Server).signalProcess, Op{ID: "signalProcess", Tag: "processes",
		Summary: "Send a signal (default TERM) to every process of the command's tree",
		Body:    jsonBody(apitypes.ProcessSignal{}), BodyOptional: true, Replies: ok(apitypes.Process{})}},
	{"POST", "/v1/workspaces/{id}/processes/{pid}/resize", (*Server).resizeProcess, Op{ID: "resizeProcess", Tag: "processes",
		Summary:     "Set the size of a process's terminal (a process started with tty); its foreground process group gets SIGWINCH",
		Description: "cols and rows are each 1 to 1000. A process without a terminal is refused (400); one that has ended is not an error: the reply shows how it ended.",
		Body:        jsonBody(apitypes.ProcessResize{}), Replies: ok(apitypes.Process{})}},
	{"POST", "/v1/workspaces/{id}/processes/{pid}/wait", (*Server).waitProcess, Op{ID: "waitProcess", Tag: "processes",
		Summary: "Wait for a process to end, within a timeout (default 30s, at most 10m); the reply shows it, still running if the time ran out",
		Body:    jsonBody(apitypes.ProcessWait{}), BodyOptional: true, Replies: ok(apitypes.Process{})}},
	{"POST", "/v1/workspaces/{id}/ports", (*Server).publishPort, Op{ID: "publishPort", Tag: "ports",
		Summary:     "Publish a port of the workspace's running sandbox on the host's loopback (the same URL when published again)",
		Description: "The daemon listens on 127.0.0.1 on a port of its own and relays each connection through the sandbox's guest to 127.0.0.1:PORT inside; the sandbox gains no route out. {id} may also be a sandbox ID.",
		Body:        jsonBody(apitypes.PortRequest{}), Replies: created(apitypes.Port{})}},
	{"GET", "/v1/workspaces/{id}/ports", (*Server).listPorts, Op{ID: "listPorts", Tag: "ports", Summary: "List the published ports of the workspace's running sandbox", Replies: ok(apitypes.PortList{})}},
	{"DELETE", "/v1/workspaces/{id}/ports/{port}", (*Server).unpublishPort, Op{ID: "unpublishPort", Tag: "ports", Summary: "Unpublish a port: its listener and its connections close", Replies: ok(apitypes.PortRemoved{})}},
	{"GET", "/v1/sandboxes/{id}/ports/{port}/{path...}", (*Server).forwardPort, forwardOp("getSandboxPort")},
	{"POST", "/v1/sandboxes/{id}/ports/{port}/{path...}", (*Server).forwardPort, forwardOp("postSandboxPort")},
	{"PUT", "/v1/sandboxes/{id}/ports/{port}/{path...}", (*Server).forwardPort, forwardOp("putSandboxPort")},
	{"PATCH", "/v1/sandboxes/{id}/ports/{port}/{path...}", (*Server).forwardPort, forwardOp("patchSandboxPort")},
	{"DELETE", "/v1/sandboxes/{id}/ports/{port}/{path...}", (*Server).forwardPort, forwardOp("deleteSandboxPort")},

	{"GET", "/v1/events", (*Server).events, Op{ID: "listEvents", Tag: "events", Summary: "The event log, oldest first (or the newest first); with follow, a stream of what is logged from then on",
		Params: []Param{
			q("repo", "events of a repo"), q("workspace", "events of a workspace"), q("sandbox", "events of a sandbox"), q("type", "events of one type (repo.cloned, ...)"),
			q("type_prefix", "events whose type starts with this (candidate.)"), q("actor", "events of one actor (api, daemon, ...)"),
			q("object", "events of one object: a repo, workspace or sandbox ID"),
			q("order", "oldest (the default: the first events after after, oldest first) or newest (the last events before before, newest first); not with follow"),
			{Name: "after", Description: "events after this ID", Type: "integer"},
			{Name: "before", Description: "events before this ID (paging back with order=newest); not with follow", Type: "integer"},
			{Name: "limit", Description: "at most this many (1 to 10000; default 1000)", Type: "integer"},
			qbool("follow", "stream the events already logged after after, then each new one, as NDJSON (an empty line is a keepalive), or SSE with Accept: text/event-stream"),
		},
		Replies: []Reply{{Status: 200, Description: "the events; with follow, a stream",
			Content: []Content{
				{Type: jsonType, Value: apitypes.EventList{}},
				{Type: ndjsonType, Value: apitypes.Event{}, Stream: true},
				{Type: sseType, Events: []Event{{"event", apitypes.Event{}}}, Description: "each event's SSE id is the event's ID"},
			}}}}},
	{"POST", "/v1/gc", (*Server).gc, Op{ID: "gc", Tag: "daemon", Summary: "Collect disk down to the data budget: idle sandboxes, unused checkouts, old repo caches, then clean workspaces past their retention",
		Body: jsonBody(apitypes.GCRequest{}), BodyOptional: true, Replies: ok(apitypes.GCReport{})}},
	{"GET", "/v1/usage", (*Server).usage, Op{ID: "usage", Tag: "usage", Summary: "What execs, egress and the agent loop's model calls (tokens, cost) used, per task label or per task and workspace (removed workspaces included)",
		Params: []Param{q("task", "one task label"), q("since", "an RFC 3339 time, or a Go duration (2h) meaning that long ago"),
			q("by", "task (the default: rows in tasks) or workspace (rows in workspaces, each with its solve run)")},
		Replies: ok(apitypes.Usage{})}},
	{"GET", "/v1/sandboxes/{id}/usage", (*Server).sandboxUsage, Op{ID: "sandboxUsage", Tag: "usage", Summary: "What one sandbox used", Replies: ok(apitypes.SandboxUsage{})}},
	{"GET", "/v1/nodes", (*Server).listNodes, Op{ID: "listNodes", Tag: "daemon",
		Summary: "The daemons sharing this daemon's store: host, pid, data dir, address, and whether each is up, stopped or lost (its heartbeat lapsed)",
		Replies: ok(apitypes.NodeList{})}},
	{"GET", "/v1/secrets", (*Server).listSecrets, Op{ID: "listSecrets", Tag: "secrets", Summary: "List the secrets' names (never their values)", Replies: ok(apitypes.SecretList{})}},
	{"PUT", "/v1/secrets/{name}", (*Server).setSecret, Op{ID: "setSecret", Tag: "secrets", Summary: "Store a secret's value, sealed; it never comes back out",
		Body: jsonBody(apitypes.SecretRequest{}), Replies: ok(apitypes.SecretSet{})}},
	{"DELETE", "/v1/secrets/{name}", (*Server).removeSecret, Op{ID: "removeSecret", Tag: "secrets", Summary: "Remove a secret", Replies: removedReply}},
}
