package apitypes

import "time"

// --- repos

// Repo is a cached git remote: a bare mirror cloned once and shared by
// every workspace made from it.
type Repo struct {
	// ID is the stable identifier ("repo_...").
	ID string `json:"id"`
	// URL is the remote as given, with any credentials removed. It is the
	// cache key: one repo per URL. agentbox://empty and
	// agentbox://upload/ID are repos agentbox made for empty and uploaded
	// workspaces: they have no remote and cannot be fetched.
	URL string `json:"url"`
	// Path is the host directory holding the bare mirror.
	Path string `json:"path"`
	// DefaultBranch is the remote's HEAD branch at the last fetch.
	DefaultBranch string `json:"default_branch"`
	// SizeBytes is the mirror's disk usage at the last fetch.
	SizeBytes int64 `json:"size_bytes"`
	// CreatedAt is when the clone finished.
	CreatedAt time.Time `json:"created_at"`
	// LastFetchAt is when the mirror was last brought up to date.
	LastFetchAt time.Time `json:"last_fetch_at"`
	// LastUsedAt is when a workspace was last created from the repo.
	LastUsedAt time.Time `json:"last_used_at"`
}

// RepoResult is the reply to an add or a fetch: the repo, and whether
// this call cloned it.
type RepoResult struct {
	Repo
	// Cloned is true when this call made the clone (an add of a URL not
	// cached yet); false for a cached repo and for a fetch.
	Cloned bool `json:"cloned"`
}

// AddRepoRequest caches a remote.
type AddRepoRequest struct {
	// URL is an https, ssh or file URL (or a local path); credentials in
	// it are used for the clone and never stored.
	URL string `json:"url"`
}

// FetchRepoRequest updates a cached repo from its remote.
type FetchRepoRequest struct {
	// URL, when set, is the repo's URL with credentials, for this one
	// fetch; it must name the same remote.
	URL string `json:"url,omitempty"`
}

// RepoProgress is one line of an add or fetch streamed as NDJSON (Accept:
// application/x-ndjson): git's progress, then the result or an error.
type RepoProgress struct {
	// Progress is one line of git's progress output.
	Progress string `json:"progress,omitempty"`
	// Result ends a stream that succeeded.
	Result *RepoResult `json:"result,omitempty"`
	// Error ends a stream that failed.
	Error *ErrorDetail `json:"error,omitempty"`
}

// RepoList is the reply of a repo listing.
type RepoList struct {
	Repos []Repo `json:"repos"`
}
