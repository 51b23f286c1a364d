package apitypes

import "time"

// Dispositions of a candidate. A candidate is made blocked or ready from
// its evidence; only a person (or a policy) makes it approved or
// rejected, and only a ready one can be approved.
const (
	DispositionBlocked  = "blocked"
	DispositionReady    = "ready"
	DispositionApproved = "approved"
	DispositionRejected = "rejected"
)

// ReviewRequest asks for a candidate of a workspace: its current files as
// a commit, with evidence gathered by agentbox.
type ReviewRequest struct {
	// Test is the task's test command (sh -c), run in a fresh sandbox on
	// exactly the candidate's commit. When neither Test nor Regress is
	// given, both come from the repository's .agentbox.yaml (review: test,
	// regress, timeout) as of the workspace's base commit, which the
	// agent cannot change. Without any the candidate is blocked: nothing
	// shows the change works.
	Test string `json:"test,omitempty"`
	// Regress is the regression command, run the same way after Test.
	Regress string `json:"regress,omitempty"`
	// Timeout bounds each command, a Go duration; default 10m.
	Timeout string `json:"timeout,omitempty"`
	// Message is the commit message when the files are not committed yet.
	Message string `json:"message,omitempty"`
}

// Candidate is a result up for review: a commit of a workspace and the
// evidence agentbox gathered about it, never what the agent reported.
type Candidate struct {
	ID          string `json:"id"`
	WorkspaceID string `json:"workspace_id"`
	RepoID      string `json:"repo_id"`
	Task        string `json:"task,omitempty"`
	// Commit is the candidate's commit; BaseCommit the workspace's base.
	Commit     string `json:"commit"`
	BaseCommit string `json:"base_commit"`
	// Branch is the workspace's branch when the candidate was made.
	Branch string `json:"branch"`
	// Disposition is blocked, ready, approved or rejected.
	Disposition string `json:"disposition"`
	// Findings name each failed check of a blocked candidate.
	Findings []string `json:"findings"`
	Evidence Evidence `json:"evidence"`
	// Decision is set once a person or a policy approved or rejected it.
	Decision *Decision `json:"decision,omitempty"`
	// Push and PR record where an approved candidate went.
	Push      *PushRecord `json:"push,omitempty"`
	PR        *PRRecord   `json:"pr,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// Evidence is what agentbox found about a candidate.
type Evidence struct {
	// Tests and Regress are the commands' results; nil when not given.
	Tests   *CommandEvidence `json:"tests,omitempty"`
	Regress *CommandEvidence `json:"regress,omitempty"`
	// Check is the diff check of the commit against the base.
	Check DiffReport `json:"check"`
	Stats DiffStats  `json:"stats"`
	// Note says what the commit folds together, when anything.
	Note string `json:"note,omitempty"`
	// CommandsFrom says where the test and regression commands came from:
	// "request", or the repository's .agentbox.yaml at the base commit.
	CommandsFrom string `json:"commands_from,omitempty"`
}

// CommandEvidence is the result of one command run for the evidence.
type CommandEvidence struct {
	Command    string `json:"command"`
	Passed     bool   `json:"passed"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	OOM        bool   `json:"oom,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	CPUMS      int64  `json:"cpu_ms,omitempty"`
	// Output is the end of stdout and stderr together, bounded.
	Output string `json:"output"`
	// Sandbox is the sandbox the command ran in (removed after).
	Sandbox string `json:"sandbox,omitempty"`
}

// DiffStats counts a change.
type DiffStats struct {
	Files      int `json:"files"`
	Insertions int `json:"insertions"`
	Deletions  int `json:"deletions"`
}

// Decision is who approved or rejected a candidate, and why.
type Decision struct {
	Disposition string    `json:"disposition"`
	Actor       string    `json:"actor"`
	Reason      string    `json:"reason"`
	At          time.Time `json:"at"`
}

// DecisionRequest approves or rejects a candidate.
type DecisionRequest struct {
	Reason string `json:"reason"`
	// Actor is who decides (default "api"), recorded in the event log.
	Actor string `json:"actor,omitempty"`
}

// PushRecord is a push of a candidate's commit.
type PushRecord struct {
	Remote string    `json:"remote"`
	Branch string    `json:"branch"`
	Commit string    `json:"commit"`
	At     time.Time `json:"at"`
}

// PRRecord is the pull request of a candidate.
type PRRecord struct {
	Forge   string    `json:"forge"`
	Number  int       `json:"number"`
	URL     string    `json:"url"`
	Updated bool      `json:"updated,omitempty"`
	At      time.Time `json:"at"`
}

// CandidateList is the reply of a candidate listing, newest first.
type CandidateList struct {
	Candidates []Candidate `json:"candidates"`
}

// ForgeBinding says how agentbox reaches a forge host: the kind of its
// API, and the stored secret holding the token used for push and pull
// requests (host-side only; a sandbox never sees it).
type ForgeBinding struct {
	Host string `json:"host"`
	// Kind is github, gitlab or gitea.
	Kind string `json:"kind"`
	// APIURL is the API base; empty: the kind's default for the host.
	APIURL string `json:"api_url,omitempty"`
	// Secret is the name of the stored secret with the token.
	Secret string `json:"secret"`
	// User is the user name sent with the token over git's HTTP basic
	// authentication (default x-access-token).
	User string `json:"user,omitempty"`
	// Protected are branch patterns never pushed to, besides the
	// remote's default branch.
	Protected []string  `json:"protected,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ForgeList is the reply of a forge listing.
type ForgeList struct {
	Forges []ForgeBinding `json:"forges"`
}
