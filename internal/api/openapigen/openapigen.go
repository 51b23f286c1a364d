// Package openapigen generates agentbox's OpenAPI document from the API's
// route table (api.RouteDocs) and the Go types it names (package
// apitypes), by reflection: internal/api/openapi.json is its output (go
// generate ./internal/api), and its tests fail when that file, the routes
// or the types drift apart. Descriptions come from the types' doc comments
// and the table's summaries.
//
// The document is OpenAPI 3.0.3 and uses only 3.0 constructs. A stream is
// typed by its item: an application/x-ndjson body's schema is one line's,
// and a text/event-stream body's schema is one event's (its name and the
// JSON of its data line).
package openapigen

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/apitypes"
)

// Version is the OpenAPI version the document declares.
const Version = "3.0.3"

// tags describe the groups of operations, in the document's order.
var tags = []struct{ name, desc string }{
	{"daemon", "the daemon itself: health, this document, metrics, disk collection"},
	{"repos", "the repo cache: remotes cloned once as bare mirrors"},
	{"workspaces", "durable workspaces: a checkout of repo@ref plus the agent's edits; status, diff, commit, fork"},
	{"review", "candidates: a workspace's result with the evidence agentbox gathered, approved or rejected by a person; push and pull request"},
	{"solve", "the agent loop: plan, edit, test in a sandbox, diagnose, retry, until a candidate for review"},
	{"files", "the file API, resolved inside the workspace's root"},
	{"sandboxes", "disposable execution environments attached to a workspace"},
	{"exec", "commands in a sandbox: streamed, buffered, or on a terminal"},
	{"processes", "background processes that outlive the request that started them"},
	{"ports", "servers inside a sandbox reached through the daemon"},
	{"events", "the append-only event log"},
	{"usage", "what execs, sandboxes and egress used"},
	{"secrets", "sealed secrets that policies bind to hosts"},
	{"mcp", "the Model Context Protocol endpoint"},
}

// Generate returns the document as the daemon serves it: indented JSON
// with a final newline.
func Generate() ([]byte, error) {
	doc, err := Build(api.RouteDocs())
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Build makes the document of routes.
func Build(routes []api.RouteDoc) (*openapi3.T, error) {
	docs, err := newDocIndex()
	if err != nil {
		return nil, err
	}
	b := &builder{s: newSchemas(docs), ids: map[string]string{}}
	errRef, err := b.s.of(reflect.TypeFor[apitypes.ErrorReply]())
	if err != nil {
		return nil, err
	}
	doc := &openapi3.T{
		OpenAPI: Version,
		Info: &openapi3.Info{
			Title:   "agentbox API",
			Version: "v1",
			Description: "Sandboxes for AI coding agents: a repo cache, durable workspaces, their files, disposable sandboxes that run commands in them, and what it all used. " +
				"Served on a unix socket (mode 0600), or on TCP with a bearer token. Every error is an ErrorReply whose code is stable for scripts. " +
				"Streams are typed by their item: an application/x-ndjson body is one JSON document per line, each of the schema given; a text/event-stream body is a sequence of events, each of the schema given (its event name, and its data line holding the JSON shown).",
		},
		Servers: openapi3.Servers{{URL: "/", Description: "the daemon: unix:///var/lib/agentbox/agentbox.sock by default, or its TCP listener"}},
		Paths:   openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas: b.s.comps,
			Responses: openapi3.ResponseBodies{"Error": &openapi3.ResponseRef{Value: &openapi3.Response{
				Description: openapi3.Ptr("an error: its class (code: not_found 404, invalid 400, conflict 409, policy_denied 403, too_large 413, unauthorized 401, unavailable 503, internal 500) and a message naming the object"),
				Content:     openapi3.NewContentWithJSONSchemaRef(errRef),
			}}},
			SecuritySchemes: openapi3.SecuritySchemes{"bearer": &openapi3.SecuritySchemeRef{Value: &openapi3.SecurityScheme{
				Type: "http", Scheme: "bearer", Description: "AGENTBOX_TOKEN; required on TCP, none on the unix socket",
			}}},
		},
		// A token on TCP; none on the unix socket.
		Security: openapi3.SecurityRequirements{{"bearer": []string{}}, {}},
	}
	// Types no route's body names: a shell's WebSocket messages.
	for _, v := range []any{apitypes.ShellControl{}} {
		if _, err := b.s.of(reflect.TypeOf(v)); err != nil {
			return nil, err
		}
	}
	used := map[string]bool{}
	for _, r := range routes {
		if err := b.route(doc, r); err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.Method, r.Path, err)
		}
		used[r.Op.Tag] = true
	}
	for _, t := range tags {
		if used[t.name] {
			doc.Tags = append(doc.Tags, &openapi3.Tag{Name: t.name, Description: t.desc})
			delete(used, t.name)
		}
	}
	if len(used) > 0 {
		return nil, fmt.Errorf("operations tagged %v, which openapigen does not describe", slices.Sorted(mapsKeys(used)))
	}
	return doc, nil
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

type builder struct {
	s   *schemas
	ids map[string]string // operationId -> route
}

func (b *builder) route(doc *openapi3.T, r api.RouteDoc) error {
	op := r.Op
	switch {
	case op.ID == "" || op.Summary == "" || op.Tag == "":
		return fmt.Errorf("the route table gives no operation ID, summary or tag")
	case b.ids[op.ID] != "":
		return fmt.Errorf("operation ID %s is also %s's", op.ID, b.ids[op.ID])
	case len(op.Replies) == 0:
		return fmt.Errorf("the route table gives no reply")
	}
	b.ids[op.ID] = r.Method + " " + r.Path
	o := &openapi3.Operation{OperationID: op.ID, Summary: op.Summary, Description: op.Description, Tags: []string{op.Tag}, Responses: openapi3.NewResponses()}
	// Path parameters, from the pattern.
	for _, seg := range strings.Split(r.Path, "/") {
		name, ok := strings.CutPrefix(seg, "{")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(strings.TrimSuffix(name, "}"), "...")
		p := openapi3.NewPathParameter(name).WithSchema(openapi3.NewStringSchema())
		p.Description = pathParamDoc(r.Path, name)
		o.Parameters = append(o.Parameters, &openapi3.ParameterRef{Value: p})
	}
	for _, qp := range op.Params {
		sc := typed(cmpOr(qp.Type, "string"))
		if qp.Repeated {
			arr := typed("array")
			arr.Items = openapi3.NewSchemaRef("", sc)
			sc = arr
		}
		p := openapi3.NewQueryParameter(qp.Name).WithSchema(sc)
		p.Description, p.Required = qp.Description, qp.Required
		o.Parameters = append(o.Parameters, &openapi3.ParameterRef{Value: p})
	}
	if len(op.Body) > 0 {
		content, desc, err := b.content(op.Body)
		if err != nil {
			return err
		}
		o.RequestBody = &openapi3.RequestBodyRef{Value: &openapi3.RequestBody{Required: !op.BodyOptional, Content: content, Description: desc}}
	}
	for _, rep := range op.Replies {
		resp := &openapi3.Response{Description: openapi3.Ptr(rep.Description)}
		if len(rep.Content) > 0 {
			content, desc, err := b.content(rep.Content)
			if err != nil {
				return err
			}
			resp.Content = content
			if desc != "" {
				resp.Description = openapi3.Ptr(rep.Description + ". " + desc)
			}
		}
		o.Responses.Set(strconv.Itoa(rep.Status), &openapi3.ResponseRef{Value: resp})
	}
	// Errors: every route may answer 401 (a TCP listener wants a token)
	// and any class; those most routes give are listed.
	errors := []string{"401"}
	if len(op.Body) > 0 || len(op.Params) > 0 {
		errors = append(errors, "400")
	}
	if strings.Contains(r.Path, "{") {
		errors = append(errors, "404")
	}
	for _, code := range append(errors, "default") {
		o.Responses.Set(code, &openapi3.ResponseRef{Ref: "#/components/responses/Error"})
	}
	item := doc.Paths.Value(openAPIPath(r.Path))
	if item == nil {
		item = &openapi3.PathItem{}
		doc.Paths.Set(openAPIPath(r.Path), item)
	}
	if item.GetOperation(r.Method) != nil {
		return fmt.Errorf("the route table has it twice")
	}
	item.SetOperation(r.Method, o)
	return nil
}

// openAPIPath is a mux pattern as OpenAPI writes a path: a trailing
// wildcard {path...} (the rest of the path) is {path}.
func openAPIPath(pattern string) string { return strings.ReplaceAll(pattern, "...}", "}") }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pathParamDoc describes a path parameter by the collection it names.
func pathParamDoc(path, name string) string {
	switch name {
	case "pid":
		return "a background process's ID (its exec's, ex_...)"
	case "port":
		return "a TCP port inside the sandbox, 1 to 65535"
	case "path":
		return "the rest of the path, passed on to the sandbox's server"
	}
	switch {
	case strings.HasPrefix(path, "/v1/repos/"):
		return "a repo ID, or its URL (path-escaped)"
	case strings.HasPrefix(path, "/v1/workspaces/"):
		return "a workspace ID"
	case strings.HasPrefix(path, "/v1/sandboxes/"):
		return "a sandbox ID"
	case strings.HasPrefix(path, "/v1/secrets/"):
		return "a secret's name"
	}
	return "the " + name
}

// content is the media type map of one body, and what to add to its
// description.
func (b *builder) content(cs []api.Content) (openapi3.Content, string, error) {
	out := openapi3.NewContent()
	var notes []string
	for _, c := range cs {
		if _, dup := out[c.Type]; dup {
			return nil, "", fmt.Errorf("media type %s twice", c.Type)
		}
		sc, err := b.body(c)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", c.Type, err)
		}
		out[c.Type] = &openapi3.MediaType{Schema: sc}
		if c.Description != "" {
			notes = append(notes, c.Type+": "+c.Description)
		}
	}
	return out, strings.Join(notes, "; "), nil
}

// body is the schema of one media type: of the value, of a stream's item,
// of an event, or raw bytes.
func (b *builder) body(c api.Content) (*openapi3.SchemaRef, error) {
	switch {
	case len(c.Events) > 0:
		return b.events(c.Events)
	case len(c.AnyOf) > 0:
		sc := &openapi3.Schema{}
		for _, v := range c.AnyOf {
			r, err := b.s.of(reflect.TypeOf(v))
			if err != nil {
				return nil, err
			}
			sc.AnyOf = append(sc.AnyOf, r)
		}
		return openapi3.NewSchemaRef("", sc), nil
	case c.Value != nil:
		return b.s.of(reflect.TypeOf(c.Value))
	case c.Type == "application/json" || c.Stream:
		return nil, fmt.Errorf("a JSON body without a Go type")
	}
	sc := typed("string")
	if !strings.HasPrefix(c.Type, "text/") {
		sc.Format = "binary"
	}
	return openapi3.NewSchemaRef("", sc), nil
}

// events is the schema of one Server-Sent Event of a stream: the event's
// name and the JSON its data line holds (one alternative per data type).
func (b *builder) events(evs []api.Event) (*openapi3.SchemaRef, error) {
	var order []reflect.Type
	names := map[reflect.Type][]any{}
	for _, e := range evs {
		t := reflect.TypeOf(e.Value)
		if _, ok := names[t]; !ok {
			order = append(order, t)
		}
		names[t] = append(names[t], e.Name)
	}
	sc := &openapi3.Schema{}
	for _, t := range order {
		data, err := b.s.of(t)
		if err != nil {
			return nil, err
		}
		name := typed("string")
		name.Enum = names[t]
		name.Description = "the event's name (its event: line)"
		id := typed("string")
		id.Description = "the event's id: line, when it has one"
		alt := typed("object")
		alt.Required = []string{"event", "data"}
		alt.Properties = openapi3.Schemas{"event": openapi3.NewSchemaRef("", name), "data": data, "id": openapi3.NewSchemaRef("", id)}
		alt.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
		sc.OneOf = append(sc.OneOf, openapi3.NewSchemaRef("", alt))
	}
	if len(sc.OneOf) == 1 {
		return sc.OneOf[0], nil
	}
	return openapi3.NewSchemaRef("", sc), nil
}
