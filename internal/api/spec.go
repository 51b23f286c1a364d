package api

// What the OpenAPI document says of each route. The route table (routes.go)
// holds one Op per route; internal/api/openapigen turns the table and the
// Go types it names (package apitypes) into openapi.json, and its tests
// fail when the document, the table and the types drift apart.

// Op describes one route for the OpenAPI document.
type Op struct {
	// ID is the operationId: unique, lowerCamelCase.
	ID string
	// Summary is one line; Description says more (optional).
	Summary, Description string
	// Tag groups operations (repos, workspaces, files, ...).
	Tag string
	// Params are the route's query parameters; path parameters ({id},
	// {name}) are documented from the path.
	Params []Param
	// Body is the request body, one Content per media type it may be
	// sent as; none: the route reads no body.
	Body []Content
	// BodyOptional says an empty body is accepted.
	BodyOptional bool
	// Replies are the successful replies. Every operation also answers
	// errors as apitypes.ErrorReply.
	Replies []Reply
}

// Param is a query parameter.
type Param struct {
	Name, Description string
	Required          bool
	// Type is "string" (default), "boolean" or "integer"; Repeated
	// makes it a list (?path=a&path=b).
	Type     string
	Repeated bool
}

// Reply is one successful response.
type Reply struct {
	// Status is the HTTP status: 200, 201, 101...
	Status      int
	Description string
	// Content lists the media types the reply may come as, chosen by the
	// request's Accept header; none: no body.
	Content []Content
}

// Content is a body of one media type.
type Content struct {
	// Type is the media type ("application/json").
	Type string
	// Value is a value of the body's Go type (its zero value); nil with
	// a Type other than JSON is raw bytes.
	Value any
	// AnyOf, instead of Value, lists the types a body (or a stream's
	// line) may have.
	AnyOf []any
	// Stream says the body is a sequence of Value (NDJSON: one JSON
	// document per line).
	Stream bool
	// Events are the events of a text/event-stream body: each event's
	// name and a value of its data's Go type.
	Events []Event
	// Description says what the body is, when its type does not.
	Description string
}

// Event is one kind of Server-Sent Event: "event: NAME" and a data line
// holding the JSON of Value.
type Event struct {
	Name  string
	Value any
}

// Media types the API speaks.
const (
	jsonType   = "application/json"
	binaryType = "application/octet-stream"
	textType   = "text/plain"
)

// RouteDoc is one route with what the document says of it.
type RouteDoc struct {
	Method, Path string
	Op           Op
}

// RouteDocs lists every route served, in table order, with its Op.
func RouteDocs() []RouteDoc {
	out := make([]RouteDoc, 0, len(routes))
	for _, r := range routes {
		out = append(out, RouteDoc{Method: r.method, Path: r.path, Op: r.op})
	}
	return out
}

// Helpers that keep the table short.

func jsonBody(v any) []Content { return []Content{{Type: jsonType, Value: v}} }

func jsonReply(status int, desc string, v any) Reply {
	return Reply{Status: status, Description: desc, Content: jsonBody(v)}
}

func ok(v any) []Reply { return []Reply{jsonReply(200, "OK", v)} }

func created(v any) []Reply { return []Reply{jsonReply(201, "Created", v)} }

func q(name, desc string) Param { return Param{Name: name, Description: desc} }

func qbool(name, desc string) Param { return Param{Name: name, Description: desc, Type: "boolean"} }

func qpath(desc string) Param {
	return Param{Name: "path", Description: desc, Required: true}
}
