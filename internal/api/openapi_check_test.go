package api_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// docCheck holds every exchange through the API to the OpenAPI document
// the daemon serves: the request (a JSON body, the parameters) and the
// reply (its status, media type and body, each line of an NDJSON stream,
// each event of an SSE stream) must be what the document says, field by
// field (the document's objects take no property they do not declare).
// A handler that sends another type than the route table names, a client
// that sends a field the type lacks, or a media type the table does not
// list fails the test that made the exchange.
type docCheck struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]int // "operationId status media type" -> count
}

func newDocCheck(t *testing.T) *docCheck {
	raw, err := os.ReadFile("openapi.json") // what the daemon embeds and serves
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	doc.Servers = nil // match any host
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := &docCheck{t: t, doc: doc, router: router, seen: map[string]int{}}
	return c
}

func (c *docCheck) failf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("OpenAPI document vs exchange: "+format, args...)
}

// covered lists what was checked: "operationId status media-type".
func (c *docCheck) covered() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k := range c.seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *docCheck) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			h.ServeHTTP(w, r) // a WebSocket: no body to check
			return
		}
		route, params, err := c.router.FindRoute(r)
		if err != nil {
			h.ServeHTTP(w, r) // not a route: the catch-all's 404
			return
		}
		var reqErr error
		var reqBody []byte
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" && r.ContentLength >= 0 && r.ContentLength < 8<<20 {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			vr := r.Clone(r.Context())
			vr.Body = io.NopCloser(bytes.NewReader(body))
			in := &openapi3filter.RequestValidationInput{Request: vr, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
			reqErr = openapi3filter.ValidateRequest(r.Context(), in)
			reqBody = body
		}
		rec := &recorder{ResponseWriter: w, status: 200}
		h.ServeHTTP(rec, r)
		// A request the document refuses must be refused (the tests
		// send some on purpose); one the server took must fit it.
		if reqErr != nil && rec.status < 400 {
			c.failf("%s %s: the server took a request the document refuses: %s: %v", r.Method, r.URL.Path, reqBody, reqErr)
		}
		c.reply(route, r, rec)
	})
}

func (c *docCheck) reply(route *routers.Route, r *http.Request, rec *recorder) {
	op := route.Operation
	what := fmt.Sprintf("%s %s -> %d", r.Method, r.URL.Path, rec.status)
	resp := op.Responses.Status(rec.status)
	if resp == nil {
		resp = op.Responses.Default()
	}
	if resp == nil {
		c.failf("%s: status %d is not documented", what, rec.status)
		return
	}
	ctype, _, _ := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	body := rec.body.Bytes()
	if rec.status == http.StatusSwitchingProtocols || (len(body) == 0 && len(resp.Value.Content) == 0) {
		return
	}
	mt := resp.Value.Content.Get(ctype)
	if mt == nil {
		c.failf("%s: media type %q is not documented (documented: %v)", what, ctype, slices.Sorted(mapKeys(resp.Value.Content)))
		return
	}
	c.mu.Lock()
	c.seen[fmt.Sprintf("%s %d %s", op.OperationID, rec.status, ctype)]++
	c.mu.Unlock()
	if rec.truncated || mt.Schema == nil {
		return
	}
	sc := mt.Schema.Value
	check := func(item []byte, v any) {
		if err := sc.VisitJSON(v, openapi3.MultiErrors()); err != nil {
			c.failf("%s %s: %.300s: %v", what, ctype, item, err)
		}
	}
	switch ctype {
	case "application/json":
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			c.failf("%s: not JSON: %v", what, err)
			return
		}
		check(body, v)
	case "application/x-ndjson":
		for line := range bytes.Lines(body) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue // a keepalive
			}
			var v any
			if err := json.Unmarshal(line, &v); err != nil {
				c.failf("%s: an NDJSON line is not JSON: %q", what, line)
				continue
			}
			check(line, v)
		}
	case "text/event-stream":
		for _, ev := range parseSSE(body) {
			if ev["event"] == nil && ev["data"] == nil {
				continue
			}
			b, _ := json.Marshal(ev)
			check(b, ev)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// parseSSE reads a Server-Sent Events body: each event as its event name,
// id and the JSON of its data.
func parseSSE(body []byte) []map[string]any {
	var out []map[string]any
	ev := map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(ev) > 0 {
				out = append(out, ev)
			}
			ev = map[string]any{}
		case strings.HasPrefix(line, ":"): // a comment: keepalive
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			if k == "data" {
				var d any
				if err := json.Unmarshal([]byte(v), &d); err != nil {
					d = v
				}
				ev[k] = d
			} else {
				ev[k] = v
			}
		}
	}
	return out
}

// recorder passes a reply through and keeps its status and (up to 16
// MiB of) its body.
type recorder struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.body.Len()+len(b) <= 16<<20 {
		r.body.Write(b)
	} else {
		r.truncated = true
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
