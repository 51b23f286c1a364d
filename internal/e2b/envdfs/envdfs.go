// Package envdfs serves the file half of E2B's in-sandbox daemon (envd) on
// an agentbox workspace: the Connect filesystem service (Stat, ListDir,
// MakeDir, Move, Remove, WatchDir and the polling watchers) and the HTTP
// upload and download endpoints at /files, in the wire format the official
// E2B SDKs speak.
//
// Nothing here runs inside the sandbox. Every file operation is a host-side
// operation on the workspace directory through internal/fileapi, which
// resolves each path beneath the workspace by descriptor and is safe
// against symlink swaps; WatchDir adds inotify watches only through
// descriptors opened beneath the workspace (see watch_linux.go).
//
// # Which sandbox paths are reachable
//
// An E2B client names paths as the sandbox sees them. The workspace is the
// only part of the sandbox whose files live on the host, so only paths that
// land in it are served:
//
//   - /workspace and everything below it: the workspace itself.
//   - Target.Home (the user's home, /home/user for E2B templates) and
//     everything below it, when Home lies outside /workspace: the same
//     workspace root. The E2B surface gives the sandbox user its home on the
//     workspace, so "~/a.txt", "a.txt" and "/workspace/a.txt" are one file.
//     A Home inside /workspace is just a directory of the workspace.
//   - A relative path, or "~" and "~/...", is taken from Target.Home.
//
// Paths are cleaned lexically first, as the sandbox's kernel would resolve
// "..": "/workspace/../etc" is /etc. Anything that does not land in the
// workspace (/etc/passwd, /tmp, /proc, "../../etc") is refused with
// invalid_argument (HTTP 400), which the SDK raises as InvalidArgumentError,
// and nothing is touched. Inside the workspace, a symlink that leads out of
// it is refused by fileapi the same way.
//
// Replies name entries under the root the client used: a listing of
// "/workspace/src" reports "/workspace/src/main.go", one of "src" reports
// "/home/user/src/main.go".
//
// # What differs from envd
//
//   - Owner and group of every entry are Target.User: the workspace belongs
//     to the sandbox user.
//   - File metadata (X-Metadata-* headers, EntryInfo.metadata) is not
//     stored: the headers are ignored and the map is always empty.
//   - Limits: a download is at most fileapi's 64 MiB (413 beyond); an
//     upload request at most 256 MiB after decoding (413), 10000 files,
//     and the workspace's disk quota (507, NotEnoughSpaceError); a listing
//     at most 10000 entries (failed_precondition), and a deep listing
//     lists .git without descending into it. A recursive watch follows at
//     most 4096 directories, a workspace has at most 128 watches, and a
//     watch whose client falls 4096 events behind ends with
//     failed_precondition.
//   - A watch never follows a symlink, not even to a directory inside the
//     workspace. allow_network_mounts is accepted and means nothing.
//   - Entries made in a new directory before its watch is in place are
//     reported as created right after the directory's own create event.
//   - A watch ends (with the Resolver's error, e.g. unavailable) once its
//     request no longer resolves: the sandbox was killed or paused; and
//     without error when the watched directory is removed or moved away,
//     or the workspace is removed.
package envdfs

import (
	"net/http"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/e2b/envdfs/fspb/fspbconnect"
	"github.com/agentbox/agentbox/internal/manager"
)

// Target is the agentbox side of one E2B sandbox, resolved by the caller
// from the request (E2b-Sandbox-Id header, access token).
type Target struct {
	// SandboxID is the agentbox sandbox running the E2B sandbox's
	// commands, if any. envdfs does not depend on it: a watch learns that
	// the E2B sandbox ended by resolving its request again (every 2 s),
	// so the Resolver must fail for a killed or paused sandbox.
	SandboxID string
	// WorkspaceID is the workspace whose files are served.
	WorkspaceID string
	// User is the sandbox user's name, reported as every entry's owner
	// and group (the workspace belongs to the sandbox user).
	User string
	// Home is the user's home as the sandbox sees it (/home/user): the
	// base of relative paths, and an alias of the workspace root when it
	// lies outside /workspace.
	Home string
}

// Resolver returns the target of a request. Its errors wrap internal/errdefs
// classes (ErrNotFound for an unknown sandbox, ErrUnauthorized for a bad
// access token, ErrPolicyDenied for a user the sandbox does not have...);
// they reach the client E2B-shaped.
//
// For the RPCs the SDK names the user in an "Authorization: Basic
// base64(user:)" header; for /files, in the "username" query parameter.
type Resolver func(r *http.Request) (Target, error)

// Register mounts the filesystem Connect service and the /files endpoints
// on mux.
func Register(mux *http.ServeMux, m *manager.Manager, resolve Resolver) {
	register(mux, m, resolve, Options{})
}

// Options are the limits of one registration; zero fields take defaults.
// Register uses the defaults; tests lower them.
type Options struct {
	// MaxUpload caps the bytes of one POST /files request body (after
	// gzip decoding). Default DefaultMaxUpload.
	MaxUpload int64
	// MaxWatches caps the directories one recursive watch follows.
	MaxWatches int
	// MaxPending caps the events a watch holds for a slow client before
	// it stops with an error.
	MaxPending int
}

// maxRequestBytes bounds one Connect request message.
const maxRequestBytes = 64 << 10

// Defaults of Options.
const (
	DefaultMaxUpload  = 256 << 20
	DefaultMaxWatches = 4096
	DefaultMaxPending = 4096
)

func register(mux *http.ServeMux, m *manager.Manager, resolve Resolver, o Options) *service {
	if o.MaxUpload <= 0 {
		o.MaxUpload = DefaultMaxUpload
	}
	if o.MaxWatches <= 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	s := &service{m: m, resolve: resolve, opts: o, hubs: newHubs(), pollers: newPollers()}
	// Connect decodes a request before the handler (and so the Resolver)
	// runs: bound what an unauthenticated client can make it buffer. The
	// service's messages are a path or two.
	path, h := fspbconnect.NewFilesystemHandler(s, connect.WithReadMaxBytes(maxRequestBytes))
	mux.Handle(path, withRequest(h))
	mux.HandleFunc("GET /files", s.download)
	mux.HandleFunc("POST /files", s.upload)
	return s
}

// service implements fspbconnect.FilesystemHandler and the /files handlers.
type service struct {
	m       *manager.Manager
	resolve Resolver
	opts    Options
	// hubs are the inotify instances of the workspaces being watched.
	hubs *hubs
	// pollers are the watchers of CreateWatcher.
	pollers *pollers
}
