package llm

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/solve"
)

// oneFile is a Browser over one file, calc.py.
type oneFile struct{}

func (oneFile) ReadLines(context.Context, string, int, int, int) (string, error) {
	return "def add(a, b):\n    return a - b\n", nil
}
func (oneFile) Grep(context.Context, string, string, int) ([]solve.GrepLine, error) {
	return []solve.GrepLine{{Path: "calc.py", Line: 2, Text: "    return a - b"}}, nil
}
func (oneFile) List(context.Context, string, string, int) ([]string, error) {
	return []string{"calc.py"}, nil
}

// TestCoderToolTurnsOnTheWire: the coder's reading turn goes back to each
// API in its own form: the assistant's tool call, then the result
// answering it by id (OpenAI: a "tool" message; Anthropic: a user turn of
// tool_result blocks), fenced as untrusted.
func TestCoderToolTurnsOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		open  func(url string) solve.Provider
		reply func(name, args string) string
		check func(t *testing.T, body string)
	}{
		{"openai", func(url string) solve.Provider { return NewOpenAI(Options{APIKey: "sk-test", BaseURL: url + "/v1"}) },
			func(name, args string) string { return openAIToolReply(name, args, 100, 10) },
			func(t *testing.T, body string) {
				var b struct {
					Messages []struct {
						Role       string `json:"role"`
						Content    any    `json:"content"`
						ToolCallID string `json:"tool_call_id"`
						ToolCalls  []struct {
							ID       string `json:"id"`
							Type     string `json:"type"`
							Function struct{ Name, Arguments string }
						} `json:"tool_calls"`
					} `json:"messages"`
				}
				if err := json.Unmarshal([]byte(body), &b); err != nil {
					t.Fatal(err)
				}
				m := b.Messages
				if len(m) != 4 || m[2].Role != "assistant" || len(m[2].ToolCalls) != 1 || m[2].ToolCalls[0].ID != "call_1" ||
					m[2].ToolCalls[0].Type != "function" || m[2].ToolCalls[0].Function.Name != "grep" || !strings.Contains(m[2].ToolCalls[0].Function.Arguments, "return") {
					t.Fatalf("the assistant's tool call: %s", body)
				}
				content, _ := m[3].Content.(string)
				if m[3].Role != "tool" || m[3].ToolCallID != "call_1" || !strings.Contains(content, solve.UntrustedOpen) || !strings.Contains(content, "calc.py:2:     return a - b") {
					t.Errorf("the tool result: %s", body)
				}
			}},
		{"anthropic", func(url string) solve.Provider { return NewAnthropic(Options{APIKey: "sk-ant-test", BaseURL: url}) },
			func(name, args string) string { return anthropicToolReply(name, args, 100, 10) },
			func(t *testing.T, body string) {
				var b struct {
					Messages []struct {
						Role    string `json:"role"`
						Content []struct {
							Type      string          `json:"type"`
							Text      string          `json:"text"`
							ID        string          `json:"id"`
							Name      string          `json:"name"`
							Input     json.RawMessage `json:"input"`
							ToolUseID string          `json:"tool_use_id"`
							Content   json.RawMessage `json:"content"`
						} `json:"content"`
					} `json:"messages"`
				}
				if err := json.Unmarshal([]byte(body), &b); err != nil {
					t.Fatal(err)
				}
				m := b.Messages
				if len(m) != 3 || m[1].Role != "assistant" || len(m[1].Content) != 2 || m[1].Content[0].Text != "Here is my answer." ||
					m[1].Content[1].Type != "tool_use" || m[1].Content[1].ID != "toolu_01" || m[1].Content[1].Name != "grep" || !strings.Contains(string(m[1].Content[1].Input), "return") {
					t.Fatalf("the assistant's tool use: %s", body)
				}
				if m[2].Role != "user" || len(m[2].Content) != 1 || m[2].Content[0].Type != "tool_result" || m[2].Content[0].ToolUseID != "toolu_01" ||
					!strings.Contains(string(m[2].Content[0].Content), "untrusted-sandbox-output") {
					t.Errorf("the tool result: %s", body)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{reply: func(n int, _ string) (int, string) {
				if n == 0 {
					return 200, tc.reply("grep", `{"pattern":"return"}`)
				}
				return 200, tc.reply("edit_file", `{"path":"calc.py","old":"return a - b","new":"return a + b"}`)
			}}
			srv := httptest.NewServer(rc)
			defer srv.Close()
			patch, u, err := solve.WritePatch(t.Context(), tc.open(srv.URL), "m", solve.CodeInput{Task: "add adds", Browse: oneFile{}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if patch.Turns != 2 || len(patch.Edits) != 1 || patch.Edits[0].New != "return a + b" || u.Calls != 2 || u.InputTokens != 200 {
				t.Errorf("patch %+v, usage %+v", patch, u)
			}
			if len(rc.bodies) != 2 {
				t.Fatalf("%d requests", len(rc.bodies))
			}
			tc.check(t, rc.bodies[1])
		})
	}
}
