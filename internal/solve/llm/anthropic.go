package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentbox/agentbox/internal/solve"
)

// Anthropic is a solve.Provider over the Messages API with tool use.
type Anthropic struct {
	opts Options
}

// NewAnthropic returns an Anthropic provider.
func NewAnthropic(opts Options) *Anthropic { return &Anthropic{opts: opts.withDefaults()} }

// Complete sends one request; the SDK retries 429, 529 and 5xx with
// backoff.
func (p *Anthropic) Complete(ctx context.Context, req solve.Request) (solve.Response, error) {
	var n atomic.Int64
	ropts := []option.RequestOption{option.WithHTTPClient(counted(p.opts.HTTPClient, &n)), option.WithMaxRetries(p.opts.MaxRetries),
		option.WithRequestTimeout(p.opts.Timeout), option.WithAPIKey(p.opts.APIKey)}
	if p.opts.BaseURL != "" {
		ropts = append(ropts, option.WithBaseURL(p.opts.BaseURL))
	}
	client := anthropic.NewClient(ropts...)
	params := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: p.opts.MaxTokens}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, m := range req.Messages {
		switch m.Role {
		case "assistant":
			// An assistant turn with tool calls carries them as
			// tool_use blocks, after its text if it had any.
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" || len(m.Calls) == 0 {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, c := range m.Calls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, json.RawMessage(c.Args), c.Name))
			}
			params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
		case "tool":
			// The results answer the calls in a user turn of
			// tool_result blocks.
			var blocks []anthropic.ContentBlockParamUnion
			for _, r := range m.Results {
				blocks = append(blocks, anthropic.NewToolResultBlock(r.CallID, r.Content, r.IsError))
			}
			params.Messages = append(params.Messages, anthropic.NewUserMessage(blocks...))
		default:
			params.Messages = append(params.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(m.Content)))
		}
	}
	for _, t := range req.Tools {
		var schema struct {
			Properties any      `json:"properties"`
			Required   []string `json:"required"`
		}
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return solve.Response{}, fmt.Errorf("tool %s: its schema: %w", t.Name, err)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name: t.Name, Description: anthropic.String(t.Description),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: schema.Properties, Required: schema.Required}}})
	}
	var resp *anthropic.Message
	var err error
	if p.opts.Stream {
		stream := client.Messages.NewStreaming(ctx, params)
		var msg anthropic.Message
		for stream.Next() {
			if err = msg.Accumulate(stream.Current()); err != nil {
				break
			}
		}
		if err == nil {
			err = stream.Err()
		}
		stream.Close()
		resp = &msg
	} else {
		resp, err = client.Messages.New(ctx, params)
	}
	usage := solve.Usage{Calls: int(n.Load())}
	if err != nil {
		return solve.Response{Usage: usage}, fmt.Errorf("anthropic %s: %w", req.Model, err)
	}
	usage.InputTokens = int(resp.Usage.InputTokens + resp.Usage.CacheCreationInputTokens + resp.Usage.CacheReadInputTokens)
	usage.OutputTokens = int(resp.Usage.OutputTokens)
	usage.CostUSD = p.opts.cost(req.Model, usage.InputTokens, usage.OutputTokens)
	out := solve.Response{Usage: usage}
	for _, b := range resp.Content {
		switch b.Type {
		case "text":
			out.Text += b.Text
		case "tool_use":
			out.Calls = append(out.Calls, solve.ToolCall{ID: b.ID, Name: b.Name, Args: b.Input})
		}
	}
	return out, nil
}
