package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// tool is one entry of the tool table: its name and how it registers
// itself on a server.
type tool struct {
	name string
	add  func(s *Server)
}

// spec describes a tool to a client and a model.
type spec struct {
	name, title string
	// description is one paragraph written for a model: what the tool
	// does, when to use it, what it returns, and its limits.
	description string
	// readOnly, destructive and idempotent become the tool's annotations.
	readOnly, destructive, idempotent bool
	// schema, if set, adjusts the input schema inferred from the
	// arguments' type (enums, bounds, what this server offers).
	schema func(s *Server, in *jsonschema.Schema)
}

// call is one tool call being answered.
type call struct {
	ctx     context.Context
	s       *Server
	session *mcp.ServerSession
	req     *mcp.CallToolRequest
}

// newTool makes a table entry of a handler that takes the decoded
// arguments In and returns the structured output Out and its text for the
// model. The input and output schemas are inferred from In and Out (their
// jsonschema tags describe each field); arguments are checked against the
// input schema and decoded strictly, and every error, the arguments' ones
// included, becomes a tool error carrying the agentbox code and message.
func newTool[In, Out any](sp spec, h func(c *call, in In) (Out, string, error)) tool {
	return tool{name: sp.name, add: func(s *Server) {
		in, err := jsonschema.For[In](nil)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: tool %s: input schema: %v", sp.name, err))
		}
		if sp.schema != nil {
			sp.schema(s, in)
		}
		resolved, err := in.Resolve(nil)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: tool %s: input schema: %v", sp.name, err))
		}
		out, err := jsonschema.For[Out](nil)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: tool %s: output schema: %v", sp.name, err))
		}
		destructive := sp.destructive
		t := &mcp.Tool{
			Name: sp.name, Title: sp.title, Description: sp.description,
			InputSchema: in, OutputSchema: out,
			Annotations: &mcp.ToolAnnotations{
				Title: sp.title, ReadOnlyHint: sp.readOnly, IdempotentHint: sp.idempotent,
				DestructiveHint: &destructive, OpenWorldHint: new(false),
			},
		}
		s.mcp.AddTool(t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args In
			if err := decodeArgs(req.Params.Arguments, resolved, &args); err != nil {
				return errorResult(errdefs.Invalid("%s: arguments: %v", sp.name, err)), nil
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(s.calls, cancel)()
			c := &call{ctx: ctx, s: s, session: req.Session, req: req}
			v, text, err := h(c, args)
			if err != nil {
				return errorResult(err), nil
			}
			structured, err := json.Marshal(v)
			if err != nil {
				return errorResult(fmt.Errorf("%s: encoding the result: %w", sp.name, err)), nil
			}
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: text}},
				StructuredContent: json.RawMessage(structured),
			}, nil
		})
	}}
}

// decodeArgs checks raw against the input schema and decodes it into v,
// refusing fields v does not have.
func decodeArgs(raw json.RawMessage, schema *jsonschema.Resolved, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage("{}")
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return err
	}
	if _, ok := generic.(map[string]any); !ok {
		return fmt.Errorf("arguments must be a JSON object")
	}
	if err := schema.Validate(generic); err != nil {
		return schemaError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// schemaError shortens the validator's message, which names the schema's
// internals, to what a model can act on.
func schemaError(err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "validating root: ")
	msg = strings.ReplaceAll(msg, "validating /properties/", "")
	return fmt.Errorf("%s", msg)
}

// workspace is the workspace a call names, or else the session's
// default.
func (c *call) workspace(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	if ws := c.s.bound(c.session); ws != "" {
		return ws, nil
	}
	return "", errdefs.Invalid(`no workspace given and none bound in this session: pass "workspace" (an ID from list_workspaces), or bind one with use_workspace or create_workspace`)
}

// --- schema adjustments

func prop(in *jsonschema.Schema, name string) *jsonschema.Schema {
	p := in.Properties[name]
	if p == nil {
		panic("mcpserver: no property " + name)
	}
	return p
}

func bounds(name string, lo, hi float64) func(*Server, *jsonschema.Schema) {
	return func(_ *Server, in *jsonschema.Schema) {
		p := prop(in, name)
		p.Minimum, p.Maximum = &lo, &hi
	}
}

func enum(name string, values ...any) func(*Server, *jsonschema.Schema) {
	return func(_ *Server, in *jsonschema.Schema) { prop(in, name).Enum = values }
}

func both(fs ...func(*Server, *jsonschema.Schema)) func(*Server, *jsonschema.Schema) {
	return func(s *Server, in *jsonschema.Schema) {
		for _, f := range fs {
			f(s, in)
		}
	}
}
