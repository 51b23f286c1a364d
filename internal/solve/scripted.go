package solve

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
)

// Script is a scripted model's file: for each role, its replies turn by
// turn. It drives end-to-end tests of the loop on real repositories in
// real sandboxes, and a demo without a model API.
//
//	planner:
//	  - calls: [{name: submit_plan, args: {files: [calc.py], approach: "..."}}]
//	coder:
//	  - calls: [{name: grep, args: {pattern: "def add"}}]  # reads first (read_file, grep, list_files)
//	  - expect: ["calc.py:1:"]                             # the next turn sees what it read
//	    calls: [{name: edit_file, args: {path: calc.py, old: "a - b", new: "a + b"}}]
//	  - expect: ["off by one"]   # the request must hold this (the diagnosis)
//	    calls: [...]
//	debugger:
//	  - calls: [{name: submit_diagnosis, args: {hypothesis: "...", fix: "..."}}]
type Script struct {
	Planner  []Turn `json:"planner"`
	Coder    []Turn `json:"coder"`
	Debugger []Turn `json:"debugger"`
}

// Turn is one scripted reply.
type Turn struct {
	// Expect lists text the request must contain: a turn that follows
	// a diagnosis can insist on seeing it.
	Expect []string   `json:"expect,omitempty"`
	Text   string     `json:"text,omitempty"`
	Calls  []ToolCall `json:"calls"`
	Usage  Usage      `json:"usage,omitempty"`
}

// ParseScript reads a script in YAML or JSON, strictly.
func ParseScript(data []byte) (*Script, error) {
	var s Script
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("scripted model: %w", err)
	}
	if len(s.Planner)+len(s.Coder)+len(s.Debugger) == 0 {
		return nil, fmt.Errorf("scripted model: the script has no turns")
	}
	return &s, nil
}

// Scripted is a Provider that answers from a Script by role and turn. It
// keeps every request it was sent, for tests to read.
type Scripted struct {
	s  *Script
	mu sync.Mutex
	// requests are the requests received, in order.
	requests []Request
}

// NewScripted returns a scripted provider.
func NewScripted(s *Script) *Scripted { return &Scripted{s: s} }

// Requests returns the requests received so far.
func (p *Scripted) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// Complete answers req with the script's turn req.Turn of req.Role.
func (p *Scripted) Complete(ctx context.Context, req Request) (Response, error) {
	p.mu.Lock()
	p.requests = append(p.requests, req)
	p.mu.Unlock()
	var turns []Turn
	switch req.Role {
	case Planner:
		turns = p.s.Planner
	case Coder:
		turns = p.s.Coder
	case Debugger:
		turns = p.s.Debugger
	}
	if req.Turn >= len(turns) {
		return Response{}, fmt.Errorf("scripted model: the script has %d %s turns, the loop asked for turn %d", len(turns), req.Role, req.Turn+1)
	}
	t := turns[req.Turn]
	all, _ := json.Marshal(req)
	for _, e := range t.Expect {
		if !strings.Contains(string(all), strings.TrimSpace(mustJSONString(e))) {
			return Response{}, fmt.Errorf("scripted model: %s turn %d expects the request to hold %q, and it does not", req.Role, req.Turn+1, e)
		}
	}
	u := t.Usage
	if u == (Usage{}) {
		// A scripted call still counts against the budgets: roughly a
		// token per four bytes sent and received.
		out, _ := json.Marshal(t.Calls)
		u = Usage{InputTokens: len(all) / 4, OutputTokens: len(out)/4 + len(t.Text)/4}
	}
	u.Calls = 1
	calls := make([]ToolCall, len(t.Calls))
	for i, c := range t.Calls {
		c.ID = fmt.Sprintf("call_%s_%d_%d", req.Role, req.Turn, i)
		calls[i] = c
	}
	return Response{Text: t.Text, Calls: calls, Usage: u}, nil
}

// mustJSONString is s as it appears inside a JSON string (the request is
// searched as JSON, where quotes and newlines are escaped).
func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
