package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/solve"
)

// recorder is an API server that answers from recorded replies in the
// API's own wire format, and keeps every request it was sent.
type recorder struct {
	mu     sync.Mutex
	bodies []string
	heads  []http.Header
	// reply answers the n-th request (from 0) given its body.
	reply func(n int, body string) (status int, resp string)
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	n := len(rc.bodies)
	rc.bodies = append(rc.bodies, string(b))
	rc.heads = append(rc.heads, r.Header.Clone())
	rc.mu.Unlock()
	status, resp := rc.reply(n, string(b))
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(resp, "data:") || strings.HasPrefix(resp, "event:") {
		w.Header().Set("Content-Type", "text/event-stream")
	}
	if status == 429 || status >= 500 {
		w.Header().Set("retry-after-ms", "5")
	}
	w.WriteHeader(status)
	io.WriteString(w, resp)
}

func openAIToolReply(name, args string, in, out int) string {
	b, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1764115200,"model":"gpt-4o-mini-2024-07-18",
"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":%q,"arguments":%s}}]},"logprobs":null,"finish_reason":"tool_calls"}],
"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d},"system_fingerprint":"fp_1"}`, name, b, in, out, in+out)
}

const openAIRateLimited = `{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

func TestOpenAIToolCallRetryAndUsage(t *testing.T) {
	rc := &recorder{reply: func(n int, _ string) (int, string) {
		if n == 0 {
			return 429, openAIRateLimited
		}
		return 200, openAIToolReply("submit_plan", `{"files":["calc.py"],"approach":"fix add"}`, 1000, 200)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := NewOpenAI(Options{APIKey: "sk-test-key", BaseURL: srv.URL + "/v1"})
	plan, u, err := solve.PlanTask(t.Context(), p, "gpt-4o-mini", "add is wrong", []string{"calc.py"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Files[0] != "calc.py" || plan.Approach != "fix add" {
		t.Errorf("plan %+v", plan)
	}
	if u.Calls != 2 || u.InputTokens != 1000 || u.OutputTokens != 200 || math.Abs(u.CostUSD-(1000*0.15+200*0.60)/1e6) > 1e-12 {
		t.Errorf("usage %+v", u)
	}
	if len(rc.bodies) != 2 || rc.bodies[0] != rc.bodies[1] {
		t.Fatalf("the retry did not resend the same request: %d requests", len(rc.bodies))
	}
	if got := rc.heads[1].Get("Authorization"); got != "Bearer sk-test-key" {
		t.Errorf("authorization %q", got)
	}
	var body struct {
		Model    string `json:"model"`
		Messages []struct{ Role, Content string }
		Tools    []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(rc.bodies[1]), &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "gpt-4o-mini" || len(body.Messages) != 2 || body.Messages[0].Role != "system" || !strings.Contains(body.Messages[1].Content, "add is wrong") {
		t.Errorf("request body: %s", rc.bodies[1])
	}
	if len(body.Tools) != 1 || body.Tools[0].Type != "function" || body.Tools[0].Function.Name != "submit_plan" || body.Tools[0].Function.Parameters["type"] != "object" {
		t.Errorf("tools: %s", rc.bodies[1])
	}
}

func TestOpenAIGivesUpAfterRetries(t *testing.T) {
	rc := &recorder{reply: func(int, string) (int, string) {
		return 503, `{"error":{"message":"overloaded","type":"server_error"}}`
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := NewOpenAI(Options{APIKey: "k", BaseURL: srv.URL + "/v1", MaxRetries: 2})
	_, err := p.Complete(t.Context(), solve.Request{Role: solve.Planner, Model: "m", Messages: []solve.Message{{Role: "user", Content: "x"}}})
	if err == nil || !strings.Contains(err.Error(), "503") || len(rc.bodies) != 3 {
		t.Errorf("err %v after %d requests", err, len(rc.bodies))
	}
	// A 400 is not retried.
	rc400 := &recorder{reply: func(int, string) (int, string) {
		return 400, `{"error":{"message":"bad","type":"invalid_request_error"}}`
	}}
	srv400 := httptest.NewServer(rc400)
	defer srv400.Close()
	_, err = NewOpenAI(Options{APIKey: "k", BaseURL: srv400.URL + "/v1"}).Complete(t.Context(), solve.Request{Model: "m"})
	if err == nil || len(rc400.bodies) != 1 {
		t.Errorf("400: err %v after %d requests", err, len(rc400.bodies))
	}
}

func anthropicToolReply(name, input string, in, out int) string {
	return fmt.Sprintf(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",
"content":[{"type":"text","text":"Here is my answer."},{"type":"tool_use","id":"toolu_01","name":%q,"input":%s}],
"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, name, input, in, out)
}

func TestAnthropicToolUseRetryAndUsage(t *testing.T) {
	rc := &recorder{reply: func(n int, _ string) (int, string) {
		if n == 0 {
			return 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
		}
		return 200, anthropicToolReply("submit_diagnosis", `{"hypothesis":"add subtracts","fix":"use +"}`, 2000, 100)
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := NewAnthropic(Options{APIKey: "sk-ant-test", BaseURL: srv.URL})
	res := solve.Result("pytest -q", apitypes.ExecOutput{ExitCode: 1, Stdout: "E AssertionError\n1 failed in 0.1s\n"}, solve.Redactor{}, solve.MaxFeedback)
	d, u, err := solve.Diagnose(t.Context(), p, "claude-sonnet-4-5", solve.DiagnoseInput{Task: "t", Result: res}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Hypothesis != "add subtracts" || d.Fix != "use +" {
		t.Errorf("diagnosis %+v", d)
	}
	if u.Calls != 2 || u.InputTokens != 2000 || u.OutputTokens != 100 || math.Abs(u.CostUSD-(2000*3+100*15)/1e6) > 1e-12 {
		t.Errorf("usage %+v", u)
	}
	if got := rc.heads[1].Get("Authorization"); got != "Bearer sk-ant-test" || rc.heads[1].Get("Anthropic-Version") == "" {
		t.Errorf("headers %v", rc.heads[1])
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		System    []struct{ Type, Text string }
		Messages  []struct {
			Role    string
			Content []struct{ Type, Text string }
		}
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		}
	}
	if err := json.Unmarshal([]byte(rc.bodies[1]), &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "claude-sonnet-4-5" || body.MaxTokens != 4096 || len(body.System) != 1 || !strings.Contains(body.System[0].Text, "never instructions") {
		t.Errorf("request body: %s", rc.bodies[1])
	}
	if len(body.Messages) != 1 || !strings.Contains(body.Messages[0].Content[0].Text, solve.UntrustedOpen) {
		t.Errorf("messages: %s", rc.bodies[1])
	}
	if len(body.Tools) != 1 || body.Tools[0].Name != "submit_diagnosis" || body.Tools[0].InputSchema["type"] != "object" {
		t.Errorf("tools: %s", rc.bodies[1])
	}
}

// fileEnv is a one-file workspace whose test prints a secret to stderr.
type fileEnv struct {
	text   string
	stderr string
}

func (e *fileEnv) Files(context.Context) ([]string, error) { return []string{"calc.py"}, nil }
func (e *fileEnv) ReadFile(context.Context, string, int) (string, error) {
	return e.text, nil
}
func (e *fileEnv) Edit(_ context.Context, ed solve.Edit) error {
	if !strings.Contains(e.text, ed.Old) {
		return fmt.Errorf("old text not found")
	}
	e.text = strings.Replace(e.text, ed.Old, ed.New, 1)
	return nil
}
func (e *fileEnv) Exec(context.Context, string, time.Duration) (apitypes.ExecOutput, error) {
	if strings.Contains(e.text, "a + b") {
		return apitypes.ExecOutput{Stdout: "1 passed in 0.01s\n"}, nil
	}
	return apitypes.ExecOutput{ExitCode: 1, Stdout: "E   AssertionError\n1 failed in 0.02s\n", Stderr: e.stderr}, nil
}

// TestLoopOverProvidersKeepsSecretsOut runs the whole loop against each
// API's recorded replies: the test prints a stored secret and a token to
// stderr, and no request body the model server received holds either.
func TestLoopOverProvidersKeepsSecretsOut(t *testing.T) {
	secret := "hunter2-is-not-a-password-0042"
	token := "AKIA" + "ABCDEFGHIJKLMNOP"
	replies := map[string][2]string{ // tool offered -> name, arguments
		"submit_plan":      {"submit_plan", `{"files":["calc.py"],"approach":"fix add"}`},
		"submit_diagnosis": {"submit_diagnosis", `{"hypothesis":"add subtracts","fix":"use +"}`},
	}
	pick := func(n int, body string) (string, string) {
		for tool, r := range replies {
			if strings.Contains(body, `"`+tool+`"`) {
				return r[0], r[1]
			}
		}
		if strings.Contains(body, "add subtracts") {
			return "edit_file", `{"path":"calc.py","old":"a * b","new":"a + b"}`
		}
		return "edit_file", `{"path":"calc.py","old":"a - b","new":"a * b"}`
	}
	for _, api := range []string{"openai", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			rc := &recorder{reply: func(n int, body string) (int, string) {
				name, args := pick(n, body)
				if api == "openai" {
					return 200, openAIToolReply(name, args, 100, 20)
				}
				return 200, anthropicToolReply(name, args, 100, 20)
			}}
			srv := httptest.NewServer(rc)
			defer srv.Close()
			var p solve.Provider = NewOpenAI(Options{APIKey: "k", BaseURL: srv.URL + "/v1"})
			if api == "anthropic" {
				p = NewAnthropic(Options{APIKey: "k", BaseURL: srv.URL})
			}
			env := &fileEnv{text: "def add(a, b):\n    return a - b\n", stderr: "debug: key=" + secret + " aws=" + token + "\n"}
			cfg := solve.Config{Task: "fix add", Test: "pytest -q", Providers: map[solve.Role]solve.Provider{solve.Planner: p, solve.Coder: p, solve.Debugger: p},
				Models:   map[solve.Role]string{solve.Planner: "small", solve.Coder: "large", solve.Debugger: "large"},
				Redactor: solve.Redactor{Secrets: []string{secret}}}
			stop, err := solve.Run(t.Context(), cfg, env, &solve.MemJournal{})
			if err != nil || !stop.Passed() || stop.Iterations != 2 {
				t.Fatalf("stop %+v %v", stop, err)
			}
			if stop.Usage.Calls != 4 || stop.Usage.Tokens() != 480 {
				t.Errorf("usage %+v", stop.Usage)
			}
			sawFeedback := false
			for i, b := range rc.bodies {
				if strings.Contains(b, secret) || strings.Contains(b, token) {
					t.Errorf("request %d holds the secret or the token: %s", i, b)
				}
				if strings.Contains(b, "[redacted known-secret]") && strings.Contains(b, "[redacted aws-access-key-id]") {
					sawFeedback = true
				}
			}
			if !sawFeedback {
				t.Errorf("no request carried the redacted feedback")
			}
			// Each role's own model.
			if !strings.Contains(rc.bodies[0], `"model":"small"`) || !strings.Contains(rc.bodies[1], `"model":"large"`) {
				t.Errorf("models per role: %s / %s", rc.bodies[0][:80], rc.bodies[1][:80])
			}
		})
	}
}

// Recorded streams, in each API's server-sent events.
const openAIStream = `data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1764115200,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"submit_plan","arguments":""}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1764115200,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"files\":[\"calc.py\"],"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1764115200,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"approach\":\"fix add\"}"}}]},"finish_reason":null}]}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1764115200,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: {"id":"chatcmpl-2","object":"chat.completion.chunk","created":1764115200,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":12,"total_tokens":62}}

data: [DONE]

`

const anthropicStream = `event: message_start
data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":300,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_02","name":"submit_plan","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"files\": [\"calc.py\"],"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" \"approach\": \"fix add\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":25}}

event: message_stop
data: {"type":"message_stop"}

`

func TestStreaming(t *testing.T) {
	for _, api := range []string{"openai", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			stream := openAIStream
			if api == "anthropic" {
				stream = anthropicStream
			}
			rc := &recorder{reply: func(n int, _ string) (int, string) {
				if n == 0 {
					return 500, `{"error":{"message":"try again","type":"server_error"}}`
				}
				return 200, stream
			}}
			srv := httptest.NewServer(rc)
			defer srv.Close()
			var p solve.Provider = NewOpenAI(Options{APIKey: "k", BaseURL: srv.URL + "/v1", Stream: true})
			if api == "anthropic" {
				p = NewAnthropic(Options{APIKey: "k", BaseURL: srv.URL, Stream: true})
			}
			plan, u, err := solve.PlanTask(t.Context(), p, "gpt-4o-mini", "task", nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Files) != 1 || plan.Files[0] != "calc.py" || plan.Approach != "fix add" {
				t.Errorf("plan %+v", plan)
			}
			if u.Calls != 2 || u.InputTokens == 0 || u.OutputTokens == 0 {
				t.Errorf("usage %+v", u)
			}
			if !strings.Contains(rc.bodies[1], `"stream":true`) {
				t.Errorf("the request did not ask for a stream: %s", rc.bodies[1])
			}
		})
	}
}

type fakeBox map[string]string

func (b fakeBox) Reveal(_ context.Context, name string) ([]byte, error) {
	v, ok := b[name]
	if !ok {
		return nil, fmt.Errorf("secret %s not found", name)
	}
	return []byte(v), nil
}

// TestOpenKeysFromSecretStore: the daemon's providers take their key and
// address from the secret store first, the daemon's environment second.
func TestOpenKeysFromSecretStore(t *testing.T) {
	rc := &recorder{reply: func(int, string) (int, string) { return 200, openAIStream }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	t.Setenv("OPENAI_API_KEY", "from-the-environment")
	t.Setenv("ANTHROPIC_API_KEY", "")
	open := Open(fakeBox{"OPENAI_API_KEY": "from-the-store\n", "OPENAI_BASE_URL": srv.URL + "/v1"})
	p, err := open(t.Context(), "openai", "gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := solve.PlanTask(t.Context(), p, "gpt-4o-mini", "task", nil, 0); err != nil {
		t.Fatal(err)
	}
	if got := rc.heads[0].Get("Authorization"); got != "Bearer from-the-store" {
		t.Errorf("authorization %q", got)
	}
	if _, err := open(t.Context(), "anthropic", "claude-sonnet-4-5"); err == nil || !strings.Contains(err.Error(), "no ANTHROPIC_API_KEY") {
		t.Errorf("anthropic without a key: %v", err)
	}
}
