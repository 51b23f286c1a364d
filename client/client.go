// Package client is the Go client of the agentbox daemon's HTTP API, and
// the only exported Go API of agentbox. The agentbox CLI is built on it.
//
// Errors returned by the daemon carry its class: test them with
// errors.Is(err, client.ErrNotFound) and friends.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Error classes of API errors.
var (
	ErrNotFound     = errdefs.ErrNotFound
	ErrConflict     = errdefs.ErrConflict
	ErrInvalid      = errdefs.ErrInvalid
	ErrPolicyDenied = errdefs.ErrPolicyDenied
	ErrUnavailable  = errdefs.ErrUnavailable
	ErrTooLarge     = errdefs.ErrTooLarge
	ErrUnauthorized = errdefs.ErrUnauthorized
)

// Error is an error reply from the daemon.
type Error struct {
	// Status is the HTTP status; Code the stable error code.
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap exposes the error class so errors.Is works.
func (e *Error) Unwrap() error { return errdefs.FromCode(e.Code) }

// Client talks to one daemon.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for host: "unix:///path/to/agentbox.sock" or
// "http://HOST:PORT" (token required by a TCP daemon).
func New(host, token string) (*Client, error) {
	c := &Client{token: token}
	switch {
	case strings.HasPrefix(host, "unix://"):
		sock := strings.TrimPrefix(host, "unix://")
		if sock == "" {
			return nil, fmt.Errorf("host %q: empty socket path: %w", host, ErrInvalid)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		c.http = &http.Client{Transport: tr}
		c.base = "http://agentbox"
	case strings.HasPrefix(host, "http://"), strings.HasPrefix(host, "https://"):
		c.http = &http.Client{}
		c.base = strings.TrimSuffix(host, "/")
	case strings.HasPrefix(host, "tcp://"):
		c.http = &http.Client{}
		c.base = "http://" + strings.TrimPrefix(host, "tcp://")
	default:
		return nil, fmt.Errorf("host %q must start with unix://, tcp://, http:// or https://: %w", host, ErrInvalid)
	}
	return c, nil
}

// DefaultHost is where the CLI looks for the daemon: $AGENTBOX_HOST, else
// the socket in $AGENTBOX_DATA, else in the default data dir.
func DefaultHost() string {
	if h := os.Getenv("AGENTBOX_HOST"); h != "" {
		return h
	}
	data := os.Getenv("AGENTBOX_DATA")
	if data == "" {
		if os.Geteuid() == 0 {
			data = "/var/lib/agentbox"
		} else if x := os.Getenv("XDG_DATA_HOME"); x != "" {
			data = filepath.Join(x, "agentbox")
		} else {
			home, _ := os.UserHomeDir()
			data = filepath.Join(home, ".local", "share", "agentbox")
		}
	}
	return "unix://" + filepath.Join(data, "agentbox.sock")
}

// FromEnv is New(DefaultHost(), $AGENTBOX_TOKEN).
func FromEnv() (*Client, error) { return New(DefaultHost(), os.Getenv("AGENTBOX_TOKEN")) }

type request struct {
	method, path string
	query        url.Values
	body         any       // JSON-encoded unless raw is set
	raw          io.Reader // sent as rawType, application/octet-stream by default
	rawType      string
	accept       string
}

func (c *Client) do(ctx context.Context, rq request) (*http.Response, error) {
	if err := emptyID(rq.path); err != nil {
		return nil, err
	}
	u := c.base + rq.path
	if len(rq.query) > 0 {
		u += "?" + rq.query.Encode()
	}
	var body io.Reader
	ctype := ""
	if rq.raw != nil {
		body, ctype = rq.raw, "application/octet-stream"
		if rq.rawType != "" {
			ctype = rq.rawType
		}
	} else if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return nil, err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if rq.accept != "" {
		req.Header.Set("Accept", rq.accept)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the agentbox daemon (is `agentbox serve` running?): %w", err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// kinds names the object of each API collection, for errors.
var kinds = map[string]string{"repos": "repo", "workspaces": "workspace", "sandboxes": "sandbox", "secrets": "secret", "processes": "process", "ports": "port"}

// emptyID refuses a request whose path has an empty ID ("/v1/workspaces//
// exec") as the daemon refuses an unknown one: the mux would otherwise
// answer it as another route, or redirect it.
func emptyID(path string) error {
	parts := strings.Split(path, "/")
	for i := 2; i < len(parts); i++ {
		if parts[i] == "" && (i+1 < len(parts) || i > 2) {
			kind := kinds[parts[i-1]]
			if kind == "" {
				kind = "object"
			}
			return &Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("%s %q not found (the ID is empty)", kind, "")}
		}
	}
	return nil
}

func decodeError(resp *http.Response) error {
	var eb apitypes.ErrorReply
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
		return &Error{Status: resp.StatusCode, Code: "internal", Message: fmt.Sprintf("daemon answered %s: %.200s", resp.Status, b)}
	}
	return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
}

func (c *Client) json(ctx context.Context, rq request, out any) error {
	resp, err := c.do(ctx, rq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding reply to %s %s: %w", rq.method, rq.path, err)
	}
	return nil
}

func esc(s string) string { return url.PathEscape(s) }

// Health is the daemon's self-description.
type Health = apitypes.Health

// Health checks that the daemon answers.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.json(ctx, request{method: "GET", path: "/v1/health"}, &h)
}

// OpenAPI returns the daemon's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var doc json.RawMessage
	return doc, c.json(ctx, request{method: "GET", path: "/v1/openapi.json"}, &doc)
}

// --- repos

// Repo is a cached repository. Cloned is set by AddRepo: true when that
// call made the clone.
type Repo = apitypes.RepoResult

// AddRepo caches rawURL (cloning it once). progress, if not nil, receives
// git's progress lines while the clone runs.
func (c *Client) AddRepo(ctx context.Context, rawURL string, progress func(line string)) (Repo, error) {
	return c.repoStream(ctx, request{method: "POST", path: "/v1/repos", body: apitypes.AddRepoRequest{URL: rawURL}}, progress)
}

// FetchRepo updates a cached repo from its remote. rawURL is optional: the
// repo's URL with credentials, for this one fetch.
func (c *Client) FetchRepo(ctx context.Context, id, rawURL string, progress func(line string)) (Repo, error) {
	var body any
	if rawURL != "" {
		body = apitypes.FetchRepoRequest{URL: rawURL}
	}
	return c.repoStream(ctx, request{method: "POST", path: "/v1/repos/" + esc(id) + "/fetch", body: body}, progress)
}

func (c *Client) repoStream(ctx context.Context, rq request, progress func(string)) (Repo, error) {
	var r Repo
	if progress == nil {
		return r, c.json(ctx, rq, &r)
	}
	rq.accept = "application/x-ndjson"
	resp, err := c.do(ctx, rq)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var msg apitypes.RepoProgress
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			return r, fmt.Errorf("decoding progress: %w", err)
		}
		switch {
		case msg.Error != nil:
			return r, &Error{Status: 0, Code: msg.Error.Code, Message: msg.Error.Message}
		case msg.Result != nil:
			return *msg.Result, nil
		case msg.Progress != "":
			progress(msg.Progress)
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	return r, errors.New("daemon closed the stream without a result")
}

// ListRepos lists cached repos.
func (c *Client) ListRepos(ctx context.Context) ([]Repo, error) {
	var out apitypes.RepoList
	if err := c.json(ctx, request{method: "GET", path: "/v1/repos"}, &out); err != nil {
		return nil, err
	}
	repos := make([]Repo, 0, len(out.Repos))
	for _, r := range out.Repos {
		repos = append(repos, Repo{Repo: r})
	}
	return repos, nil
}

// GetRepo shows a repo by ID or URL.
func (c *Client) GetRepo(ctx context.Context, idOrURL string) (Repo, error) {
	var r Repo
	return r, c.json(ctx, request{method: "GET", path: "/v1/repos/" + esc(idOrURL)}, &r)
}

// RemoveRepo removes a repo; force also removes its workspaces.
func (c *Client) RemoveRepo(ctx context.Context, idOrURL string, force bool) (string, error) {
	var out apitypes.Removed
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return out.ID, c.json(ctx, request{method: "DELETE", path: "/v1/repos/" + esc(idOrURL), query: q}, &out)
}

// --- workspaces

// Workspace is a durable workspace.
type Workspace = apitypes.Workspace

// CreateWorkspace asks for a new workspace: of a repo (Repo, Ref), or
// empty (Empty: a fresh repository with one empty commit). UploadDir and
// UploadWorkspace make one from a directory instead. Disk is the disk
// quota ("2G"; ParseByteSize reads one); zero: the daemon's default.
type CreateWorkspace = apitypes.CreateWorkspaceRequest

// ByteSize is a size in bytes that JSON carries as "2G" (or a number).
type ByteSize = apitypes.ByteSize

// ParseByteSize reads a size: "512M", "1.5G", "1024".
func ParseByteSize(s string) (ByteSize, error) { return apitypes.ParseByteSize(s) }

// CreateWorkspace makes a workspace (adding the repo if it is a URL).
func (c *Client) CreateWorkspace(ctx context.Context, req CreateWorkspace) (Workspace, error) {
	var w Workspace
	return w, c.json(ctx, request{method: "POST", path: "/v1/workspaces", body: req}, &w)
}

// ListWorkspaces lists workspaces, optionally of one repo or task.
func (c *Client) ListWorkspaces(ctx context.Context, repo, task string) ([]Workspace, error) {
	q := url.Values{}
	if repo != "" {
		q.Set("repo", repo)
	}
	if task != "" {
		q.Set("task", task)
	}
	var out apitypes.WorkspaceList
	return out.Workspaces, c.json(ctx, request{method: "GET", path: "/v1/workspaces", query: q}, &out)
}

// GetWorkspace shows a workspace.
func (c *Client) GetWorkspace(ctx context.Context, id string) (Workspace, error) {
	var w Workspace
	return w, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(id)}, &w)
}

// RemoveWorkspace deletes a workspace and its files.
func (c *Client) RemoveWorkspace(ctx context.Context, id string) error {
	return c.json(ctx, request{method: "DELETE", path: "/v1/workspaces/" + esc(id)}, nil)
}

// Change is a path changed since the base commit.
type Change = apitypes.Change

// Status is a workspace's state relative to its base.
type Status = apitypes.Status

// DiskUsage is what a workspace has used of its disk quota.
type DiskUsage = apitypes.DiskUsage

// Status lists changes since the base commit.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	var s Status
	return s, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(id) + "/status"}, &s)
}

// Diff is a workspace's unified diff against its base.
type Diff = apitypes.Diff

// Diff returns the unified diff against the base commit, optionally
// limited to paths.
func (c *Client) Diff(ctx context.Context, id string, paths ...string) (Diff, error) {
	var d Diff
	return d, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(id) + "/diff", query: url.Values{"path": paths}}, &d)
}

// Patch is the workspace's result as an mbox of git format-patch
// messages from its base: the commits agentbox made on the branch, then
// the uncommitted change as one more (Diff.Format is "patch").
func (c *Client) Patch(ctx context.Context, id string) (Diff, error) {
	var d Diff
	return d, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(id) + "/diff", query: url.Values{"format": {"patch"}}}, &d)
}

// BundleInfo describes a bundle written by Bundle.
type BundleInfo struct {
	ID string `json:"id"`
	// Branch is the branch in the bundle; Tip its commit; Base its
	// prerequisite (fetch the bundle into a clone that has it).
	Branch string `json:"branch"`
	Tip    string `json:"tip"`
	Base   string `json:"base_commit"`
	Bytes  int64  `json:"bytes"`
	// Note says what the bundle folds together, when anything.
	Note string `json:"note,omitempty"`
}

// Bundle writes a git bundle of the workspace's branch from its base
// commit to w.
func (c *Client) Bundle(ctx context.Context, id string, w io.Writer) (BundleInfo, error) {
	resp, err := c.do(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(id) + "/bundle"})
	if err != nil {
		return BundleInfo{}, err
	}
	defer resp.Body.Close()
	info := BundleInfo{ID: id, Branch: resp.Header.Get("Agentbox-Branch"), Tip: resp.Header.Get("Agentbox-Tip"),
		Base: resp.Header.Get("Agentbox-Base"), Note: resp.Header.Get("Agentbox-Note")}
	info.Bytes, err = io.Copy(w, resp.Body)
	if err != nil {
		return info, fmt.Errorf("reading the bundle of workspace %s: %w", id, err)
	}
	return info, nil
}

// Author is a commit identity.
type Author = apitypes.Author

// CommitResult names the commit made.
type CommitResult = apitypes.CommitResult

// Commit records every change as one commit on the workspace's branch.
// A diff that fails the check is refused (see CommitWith).
func (c *Client) Commit(ctx context.Context, id, message string, author *Author) (CommitResult, error) {
	return c.CommitWith(ctx, id, apitypes.CommitRequest{Message: message, Author: author})
}

// CommitRequest asks for a commit; see apitypes.CommitRequest.
type CommitRequest = apitypes.CommitRequest

// CommitWith records every change as one commit, as req says: a diff that
// fails the check (paths outside the writable paths, secrets) is refused
// with a conflict naming each finding, unless req.Force.
func (c *Client) CommitWith(ctx context.Context, id string, req CommitRequest) (CommitResult, error) {
	var r CommitResult
	return r, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(id) + "/commit", body: req}, &r)
}

// ForkWorkspace copies a workspace onto a new branch.
func (c *Client) ForkWorkspace(ctx context.Context, id, branch, task string) (Workspace, error) {
	return c.Fork(ctx, id, Fork{Branch: branch, Task: task})
}

// Fork asks for a copy of a workspace; a zero Disk keeps the parent's
// quota.
type Fork = apitypes.ForkRequest

// Fork copies a workspace as req says.
func (c *Client) Fork(ctx context.Context, id string, req Fork) (Workspace, error) {
	var w Workspace
	return w, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(id) + "/fork", body: req}, &w)
}

// Forks asks for several copies of a workspace at once.
type Forks = apitypes.ForksRequest

// ForkList names the forks made.
type ForkList = apitypes.ForkList

// ForkN makes req.Count copies of a workspace at once, all or none.
func (c *Client) ForkN(ctx context.Context, id string, req Forks) (ForkList, error) {
	var l ForkList
	return l, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(id) + "/forks", body: req}, &l)
}

// --- files

// FileInfo describes a path in a workspace (symlinks not followed).
type FileInfo = apitypes.FileInfo

// FileList is a directory listing, recursive to its Depth.
type FileList = apitypes.FileList

// FileContent is a file, or a range of it, as one JSON document: its
// content and, for a range of lines, the numbered lines.
type FileContent = apitypes.FileContent

// Line is one numbered line of a file.
type Line = apitypes.Line

// EditRequest replaces an exact string in a file; EditResult says what it
// changed.
type (
	EditRequest = apitypes.EditRequest
	EditResult  = apitypes.EditResult
)

// FindRequest looks for paths by glob; FindResult lists what matched.
type (
	FindRequest = apitypes.FindRequest
	FindResult  = apitypes.FindResult
)

func filesPath(id, sub string) string { return "/v1/workspaces/" + esc(id) + "/files" + sub }

// ReadFile streams a file's content into w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	return c.ReadFileRange(ctx, id, path, Range{}, w)
}

// Range selects part of a file: lines FirstLine to LastLine (1-based and
// inclusive, LastLine 0 meaning to the end), or else Length bytes from
// Offset (Length 0 meaning to the end). The zero Range is the whole file.
type Range struct {
	FirstLine, LastLine int
	Offset, Length      int64
}

func (r Range) query(q url.Values) {
	switch {
	case r.FirstLine > 0 && r.LastLine > 0:
		q.Set("lines", strconv.Itoa(r.FirstLine)+":"+strconv.Itoa(r.LastLine))
	case r.FirstLine > 0:
		q.Set("lines", strconv.Itoa(r.FirstLine)+":")
	case r.Offset > 0 || r.Length > 0:
		b := strconv.FormatInt(r.Offset, 10) + ":"
		if r.Length > 0 {
			b += strconv.FormatInt(r.Length, 10)
		}
		q.Set("bytes", b)
	}
}

// ReadFileRange streams the part of a file that r selects into w; a file
// larger than the daemon's read limit can be read in ranges.
func (c *Client) ReadFileRange(ctx context.Context, id, path string, r Range, w io.Writer) (int64, error) {
	q := url.Values{"path": {path}}
	r.query(q)
	resp, err := c.do(ctx, request{method: "GET", path: filesPath(id, ""), query: q})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("reading %s from workspace %s: %w", path, id, err)
	}
	return n, nil
}

// ReadFileContent reads the part of a file that r selects as one
// document: the content, and for a range of lines the lines numbered.
func (c *Client) ReadFileContent(ctx context.Context, id, path string, r Range) (FileContent, error) {
	q := url.Values{"path": {path}}
	r.query(q)
	var fc FileContent
	return fc, c.json(ctx, request{method: "GET", path: filesPath(id, ""), query: q, accept: "application/json"}, &fc)
}

// EditFile replaces req.Old by req.New in a file: it must occur exactly
// once unless req.All. Atomic and durable when it returns.
func (c *Client) EditFile(ctx context.Context, id string, req EditRequest) (EditResult, error) {
	var r EditResult
	return r, c.json(ctx, request{method: "POST", path: filesPath(id, "/edit"), body: req}, &r)
}

// FindFiles lists the paths that match a glob.
func (c *Client) FindFiles(ctx context.Context, id string, req FindRequest) (FindResult, error) {
	var r FindResult
	return r, c.json(ctx, request{method: "POST", path: filesPath(id, "/find"), body: req}, &r)
}

// ListTree lists a directory and, down to depth levels, what is inside it
// (1: the directory's own entries).
func (c *Client) ListTree(ctx context.Context, id, path string, depth int) (FileList, error) {
	q := url.Values{"path": {path}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var l FileList
	return l, c.json(ctx, request{method: "GET", path: filesPath(id, "/list"), query: q}, &l)
}

// WriteFile writes r to path atomically; durable when it returns. mode 0
// means 0644.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode os.FileMode, parents bool) (FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	if parents {
		q.Set("parents", "true")
	}
	if r == nil {
		r = strings.NewReader("")
	}
	var fi FileInfo
	return fi, c.json(ctx, request{method: "PUT", path: filesPath(id, ""), query: q, raw: r}, &fi)
}

// StatFile describes path (symlinks not followed).
func (c *Client) StatFile(ctx context.Context, id, path string) (FileInfo, error) {
	var fi FileInfo
	return fi, c.json(ctx, request{method: "GET", path: filesPath(id, "/stat"), query: url.Values{"path": {path}}}, &fi)
}

// ListFiles lists a directory.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	var out FileList
	return out.Entries, c.json(ctx, request{method: "GET", path: filesPath(id, "/list"), query: url.Values{"path": {path}}}, &out)
}

// RemoveFile removes a path; recursive for non-empty directories.
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.json(ctx, request{method: "DELETE", path: filesPath(id, ""), query: q}, nil)
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, id, path string, parents bool) (FileInfo, error) {
	var fi FileInfo
	return fi, c.json(ctx, request{method: "POST", path: filesPath(id, "/mkdir"), body: apitypes.MkdirRequest{Path: path, Parents: parents}}, &fi)
}

// Rename moves a path.
func (c *Client) Rename(ctx context.Context, id, from, to string) error {
	return c.json(ctx, request{method: "POST", path: filesPath(id, "/rename"), body: apitypes.RenameRequest{From: from, To: to}}, nil)
}

// GrepRequest is a bounded content search; GrepResult what it found,
// GrepMatch one matching line.
type (
	GrepRequest = apitypes.GrepRequest
	GrepMatch   = apitypes.GrepMatch
	GrepResult  = apitypes.GrepResult
)

// Grep searches file contents.
func (c *Client) Grep(ctx context.Context, id string, req GrepRequest) (GrepResult, error) {
	var r GrepResult
	return r, c.json(ctx, request{method: "POST", path: filesPath(id, "/grep"), body: req}, &r)
}

// --- events

// Event is one entry of the event log.
type Event = apitypes.Event

// EventFilter selects events.
type EventFilter struct {
	Repo, Workspace, Sandbox, Type string
	// TypePrefix keeps the types that start with it; Actor one actor's
	// events; Object one repo's, workspace's or sandbox's, by its ID.
	TypePrefix, Actor, Object string
	After                     int64
	// Before keeps the events before this ID; Newest lists the newest
	// first (the last Limit before Before) instead of the oldest.
	Before int64
	Newest bool
	Limit  int
}

// Events lists the event log, oldest first (f.Newest: newest first).
func (c *Client) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	q := url.Values{}
	for k, v := range map[string]string{"repo": f.Repo, "workspace": f.Workspace, "sandbox": f.Sandbox, "type": f.Type,
		"type_prefix": f.TypePrefix, "actor": f.Actor, "object": f.Object} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.After > 0 {
		q.Set("after", strconv.FormatInt(f.After, 10))
	}
	if f.Before > 0 {
		q.Set("before", strconv.FormatInt(f.Before, 10))
	}
	if f.Newest {
		q.Set("order", "newest")
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out apitypes.EventList
	return out.Events, c.json(ctx, request{method: "GET", path: "/v1/events", query: q}, &out)
}

// --- review

// ReviewRequest asks for a candidate; see apitypes.ReviewRequest.
type ReviewRequest = apitypes.ReviewRequest

// Candidate is a result up for review, with its evidence.
type Candidate = apitypes.Candidate

// Review makes a candidate of a workspace (see apitypes.ReviewRequest).
func (c *Client) Review(ctx context.Context, ws string, req ReviewRequest) (Candidate, error) {
	var out Candidate
	return out, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/candidates", body: req}, &out)
}

// Candidates lists a workspace's candidates, newest first.
func (c *Client) Candidates(ctx context.Context, ws string) ([]Candidate, error) {
	var out apitypes.CandidateList
	return out.Candidates, c.json(ctx, request{method: "GET", path: "/v1/workspaces/" + esc(ws) + "/candidates"}, &out)
}

// GetCandidate returns a candidate.
func (c *Client) GetCandidate(ctx context.Context, id string) (Candidate, error) {
	var out Candidate
	return out, c.json(ctx, request{method: "GET", path: "/v1/candidates/" + esc(id)}, &out)
}

// Decide approves (approve true) or rejects a candidate, as actor, for a
// reason.
func (c *Client) Decide(ctx context.Context, id string, approve bool, actor, reason string) (Candidate, error) {
	verb := "reject"
	if approve {
		verb = "approve"
	}
	var out Candidate
	return out, c.json(ctx, request{method: "POST", path: "/v1/candidates/" + esc(id) + "/" + verb,
		body: apitypes.DecisionRequest{Reason: reason, Actor: actor}}, &out)
}

// Push sends the workspace's newest approved candidate to its remote.
func (c *Client) Push(ctx context.Context, ws string) (Candidate, error) {
	var out Candidate
	return out, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/push"}, &out)
}

// PullRequest pushes the workspace's newest approved candidate and opens
// (or updates) its pull request.
func (c *Client) PullRequest(ctx context.Context, ws string) (Candidate, error) {
	var out Candidate
	return out, c.json(ctx, request{method: "POST", path: "/v1/workspaces/" + esc(ws) + "/pr"}, &out)
}

// ForgeBinding is how the daemon reaches a forge host.
type ForgeBinding = apitypes.ForgeBinding

// SetForge binds a forge host (f.Host) to its API kind and the stored
// secret with its token.
func (c *Client) SetForge(ctx context.Context, f ForgeBinding) (ForgeBinding, error) {
	var out ForgeBinding
	return out, c.json(ctx, request{method: "PUT", path: "/v1/forges/" + esc(f.Host), body: f}, &out)
}

// Forges lists the forge bindings.
func (c *Client) Forges(ctx context.Context) ([]ForgeBinding, error) {
	var out apitypes.ForgeList
	return out.Forges, c.json(ctx, request{method: "GET", path: "/v1/forges"}, &out)
}

// RemoveForge drops a host's binding.
func (c *Client) RemoveForge(ctx context.Context, host string) error {
	return c.json(ctx, request{method: "DELETE", path: "/v1/forges/" + esc(host)}, nil)
}
