package solve

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Provider is a model behind an API: one request, one reply with tool
// calls. Implementations retry what is worth retrying themselves (429,
// 5xx) and report the tokens and cost of each call.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Request is one model call. Every role sends its system prompt, its
// messages and the tools it may call.
type Request struct {
	Role  Role   `json:"role"`
	Model string `json:"model"`
	// Turn counts the role's calls in this attempt from 0, so that a
	// scripted model replays the same reply after a restart.
	Turn     int       `json:"turn"`
	System   string    `json:"system"`
	Messages []Message `json:"messages"`
	Tools    []Tool    `json:"tools"`
}

// Message is a user or assistant message of a request, or (role "tool")
// the results of the tool calls of the assistant message before it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Calls are an assistant message's tool calls.
	Calls []ToolCall `json:"calls,omitempty"`
	// Results answer Calls of the message before, one each.
	Results []ToolResult `json:"results,omitempty"`
}

// ToolResult is what agentbox answers a tool call with.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// Tool is a function the model may call, its parameters a JSON Schema.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ToolCall is a call the model made.
type ToolCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Response is the model's reply.
type Response struct {
	Text  string     `json:"text,omitempty"`
	Calls []ToolCall `json:"calls,omitempty"`
	Usage Usage      `json:"usage"`
}

// Usage is what calls cost.
type Usage struct {
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// Calls is how many model calls (and retries) were made.
	Calls int `json:"calls"`
}

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		CostUSD: u.CostUSD + v.CostUSD, Calls: u.Calls + v.Calls}
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int { return u.InputTokens + u.OutputTokens }

// ParseModel splits PROVIDER:MODEL ("scripted" alone is allowed).
func ParseModel(spec string) (provider, model string, err error) {
	provider, model, _ = strings.Cut(spec, ":")
	switch provider {
	case "scripted":
		return provider, model, nil
	case "openai", "anthropic":
		if model == "" {
			return "", "", fmt.Errorf("model %q: name the model after %s:", spec, provider)
		}
		return provider, model, nil
	}
	return "", "", fmt.Errorf("model %q: the provider is not scripted, openai or anthropic", spec)
}
