// Package solve is the agent loop of `agentbox solve`: a planner turns a
// task into a plan, a coder edits files through the file tools, an
// executor runs the tests in the sandbox, a debugger reads the bounded,
// redacted failure and says what to change, and the loop goes round until
// the tests pass or a limit stops it. Each role speaks in typed messages
// so that it can be tested alone and every step can be recorded and
// replayed after a daemon restart. The loop ends with a candidate from the
// manager's review gate; it never merges or pushes.
package solve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Role names a participant of the loop.
type Role string

// The roles. Planner, coder and debugger are model calls; the executor
// runs the test command in the sandbox.
const (
	Planner  Role = "planner"
	Coder    Role = "coder"
	Executor Role = "executor"
	Debugger Role = "debugger"
)

// ModelRoles are the roles a model plays, each configurable on its own.
var ModelRoles = []Role{Planner, Coder, Debugger}

// Plan is the planner's message: where to look, how to fix it, how to
// tell it worked.
type Plan struct {
	Files    []string `json:"files"`
	Approach string   `json:"approach"`
	// Test is the command the planner would run; the run's own test
	// command is what the executor runs (the model does not choose it).
	Test string `json:"test,omitempty"`
}

// Edit is one change through the file tools: Old replaced by New, where
// Old occurs exactly once, or, with Old empty, the whole file written as
// New.
type Edit struct {
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new"`
}

// Patch is the coder's message: the edits of one attempt at the fix.
type Patch struct {
	Edits []Edit `json:"edits"`
	// Dependencies are the packages the coder asked for (add_dependency),
	// admitted and installed before the edits are made (deps.go).
	Dependencies []string `json:"dependencies,omitempty"`
	// Note is what the coder said alongside, if anything.
	Note string `json:"note,omitempty"`
	// Turns is how many model calls the coder made for it: its reads,
	// then the reply with the edits.
	Turns int `json:"turns,omitempty"`
}

// Signature identifies a patch by its edits, so that the breaker sees the
// same edit proposed again.
func (p Patch) Signature() string {
	b, _ := json.Marshal(p.Edits)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// TestSummary is what the test runner's own summary line says.
type TestSummary struct {
	Passed int    `json:"passed"`
	Failed int    `json:"failed"`
	Errors int    `json:"errors"`
	Line   string `json:"line,omitempty"`
}

// ExecutionResult is the executor's message: how the test command ended
// and its output, bounded and redacted, labelled untrusted.
type ExecutionResult struct {
	Command    string `json:"command"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	TimedOut   bool   `json:"timed_out"`
	OOM        bool   `json:"oom"`
	Lost       bool   `json:"lost,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// Output is stdout then stderr, redacted, then cut to its head and
	// tail with a marker between.
	Output string `json:"output"`
	// Truncated says the output was cut (by the sandbox's cap or here).
	Truncated bool `json:"truncated"`
	// Redactions counts what redaction replaced.
	Redactions int         `json:"redactions"`
	Summary    TestSummary `json:"summary"`
	// Category is the failure's class ("" when it passed).
	Category string `json:"category,omitempty"`
	// Signature is the failure's normalised fingerprint.
	Signature string `json:"signature,omitempty"`
	Passed    bool   `json:"passed"`
}

// Diagnosis is the debugger's message: explain, then fix.
type Diagnosis struct {
	// Hypothesis is the suspected bug or the failing invariant.
	Hypothesis string `json:"hypothesis"`
	// Fix is the change the coder should make next.
	Fix string `json:"fix"`
}

// Stop says what ended an attempt's loop.
type Stop struct {
	// Reason is "passed" or the limit: "token budget", "step limit",
	// "wall-clock budget", "cost budget", "circuit breaker: ...",
	// "canceled", "error: ...".
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	Usage  Usage  `json:"usage"`
	// Iterations is how many patches were tried.
	Iterations int            `json:"iterations"`
	Failures   map[string]int `json:"failures,omitempty"`
}

// Passed reports whether the loop ended with the tests passing.
func (s Stop) Passed() bool { return s.Reason == StopPassed }

// Stop reasons that are not a limit's message.
const (
	StopPassed   = "passed"
	StopCanceled = "canceled"
)
