package apitypes

// --- replies every part of the API shares

// ErrorReply is the body of every error response, and the error line or
// event of a stream that fails after it started.
type ErrorReply struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error: its class and what went wrong, naming the
// object.
type ErrorDetail struct {
	// Code is the error's class, stable for scripts: not_found (404),
	// conflict (409), invalid (400), policy_denied (403), unavailable
	// (503), too_large (413), unauthorized (401) or internal (500).
	Code string `json:"code" enum:"not_found,conflict,invalid,policy_denied,unavailable,too_large,unauthorized,internal"`
	// Message names the object and the reason ("workspace ws_1 not
	// found").
	Message string `json:"message"`
}

// Health is the daemon's self-description.
type Health struct {
	// Status is "ok" when the daemon answers.
	Status  string `json:"status"`
	Version string `json:"version"`
	// WorkspaceDriver is the driver new workspaces get: overlay or copy.
	WorkspaceDriver string `json:"workspace_driver"`
}

// Removed is the reply to a removal: the object's ID.
type Removed struct {
	ID      string `json:"id"`
	Removed bool   `json:"removed"`
}
