package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentbox/agentbox/internal/solve"
)

// OpenAI is a solve.Provider over Chat Completions with tool calling: the
// OpenAI API or any server that speaks it.
type OpenAI struct {
	opts Options
}

// NewOpenAI returns an OpenAI provider.
func NewOpenAI(opts Options) *OpenAI { return &OpenAI{opts: opts.withDefaults()} }

// Complete sends one request; the SDK retries 429 and 5xx with backoff.
func (p *OpenAI) Complete(ctx context.Context, req solve.Request) (solve.Response, error) {
	var n atomic.Int64
	ropts := []option.RequestOption{option.WithHTTPClient(counted(p.opts.HTTPClient, &n)), option.WithMaxRetries(p.opts.MaxRetries),
		option.WithRequestTimeout(p.opts.Timeout), option.WithAPIKey(p.opts.APIKey)}
	if p.opts.BaseURL != "" {
		ropts = append(ropts, option.WithBaseURL(p.opts.BaseURL))
	}
	client := openai.NewClient(ropts...)
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(req.Model), MaxCompletionTokens: openai.Int(p.opts.MaxTokens)}
	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch {
		case m.Role == "assistant" && len(m.Calls) > 0:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, c := range m.Calls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: string(c.Args)}}})
			}
			params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case m.Role == "assistant":
			params.Messages = append(params.Messages, openai.AssistantMessage(m.Content))
		case m.Role == "tool":
			// One tool message per call answered.
			for _, r := range m.Results {
				params.Messages = append(params.Messages, openai.ToolMessage(r.Content, r.CallID))
			}
		default:
			params.Messages = append(params.Messages, openai.UserMessage(m.Content))
		}
	}
	for _, t := range req.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return solve.Response{}, fmt.Errorf("tool %s: its schema: %w", t.Name, err)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(schema)}))
	}
	var resp *openai.ChatCompletion
	var err error
	if p.opts.Stream {
		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err = stream.Err(); err == nil {
			resp = &acc.ChatCompletion
		}
		stream.Close()
	} else {
		resp, err = client.Chat.Completions.New(ctx, params)
	}
	usage := solve.Usage{Calls: int(n.Load())}
	if err != nil {
		return solve.Response{Usage: usage}, fmt.Errorf("openai %s: %w", req.Model, err)
	}
	usage.InputTokens, usage.OutputTokens = int(resp.Usage.PromptTokens), int(resp.Usage.CompletionTokens)
	usage.CostUSD = p.opts.cost(req.Model, usage.InputTokens, usage.OutputTokens)
	out := solve.Response{Usage: usage}
	if len(resp.Choices) == 0 {
		return out, fmt.Errorf("openai %s: a reply without choices", req.Model)
	}
	msg := resp.Choices[0].Message
	out.Text = msg.Content
	for _, c := range msg.ToolCalls {
		if c.Type != "function" {
			continue
		}
		args := json.RawMessage(c.Function.Arguments)
		if !json.Valid(args) {
			return out, fmt.Errorf("openai %s: the arguments of %s are not JSON", req.Model, c.Function.Name)
		}
		out.Calls = append(out.Calls, solve.ToolCall{ID: c.ID, Name: c.Function.Name, Args: args})
	}
	return out, nil
}
