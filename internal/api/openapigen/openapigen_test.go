package openapigen

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/api"
)

// TestDocumentIsGenerated fails when openapi.json (what the daemon serves)
// is not what the route table and the types generate: a route, a field, a
// type or a media type changed without go generate ./internal/api.
func TestDocumentIsGenerated(t *testing.T) {
	want, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		var g, w any
		json.Unmarshal(got, &g)
		json.Unmarshal(want, &w)
		t.Errorf("internal/api/openapi.json is stale: run go generate ./internal/api (-committed +generated):\n%s", cmp.Diff(g, w))
	}
}

// TestDocumentIsValid loads the document as a client would and validates
// it as OpenAPI 3.0.
func TestDocumentIsValid(t *testing.T) {
	raw, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != Version || !strings.HasPrefix(Version, "3.0.") {
		t.Errorf("openapi = %q", doc.OpenAPI)
	}
	if err := doc.Validate(t.Context(), openapi3.EnableSchemaPatternValidation(), openapi3.EnableSchemaFormatValidation()); err != nil {
		t.Fatalf("the document is not valid OpenAPI %s: %v", Version, err)
	}
	// 3.0 has no type arrays: a schema has one type or none.
	if bytes.Contains(raw, []byte(`"type": [`)) {
		t.Error("the document uses 3.1 type arrays")
	}
}

// TestEveryRouteDocumented checks that every route of the table is an
// operation of the document with its media types, and nothing else is.
func TestEveryRouteDocumented(t *testing.T) {
	doc, err := Build(api.RouteDocs())
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented = append(documented, method+" "+path)
			if op.Responses.Default() == nil || op.Responses.Value("401") == nil {
				t.Errorf("%s %s: no error replies", method, path)
			}
		}
	}
	served := api.Routes()
	slices.Sort(served)
	slices.Sort(documented)
	if d := cmp.Diff(served, documented); d != "" {
		t.Errorf("routes vs document (-served +documented):\n%s", d)
	}
	for _, r := range api.RouteDocs() {
		op := doc.Paths.Value(openAPIPath(r.Path)).GetOperation(r.Method)
		for _, rep := range r.Op.Replies {
			resp := op.Responses.Status(rep.Status)
			if resp == nil {
				t.Errorf("%s %s: no %d reply", r.Method, r.Path, rep.Status)
				continue
			}
			var want, got []string
			for _, c := range rep.Content {
				want = append(want, c.Type)
			}
			for ct := range resp.Value.Content {
				got = append(got, ct)
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(want, got) {
				t.Errorf("%s %s %d: media types %v, the table says %v", r.Method, r.Path, rep.Status, got, want)
			}
		}
	}
}

// TestSchemasMatchTypes checks each component field by field against its
// Go type: a value of the type with every field set encodes to a document
// the schema accepts, holding every property the schema declares, and an
// unknown property is refused.
func TestSchemasMatchTypes(t *testing.T) {
	docs, err := newDocIndex()
	if err != nil {
		t.Fatal(err)
	}
	b := &builder{s: newSchemas(docs), ids: map[string]string{}}
	raw, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw) // refs resolved
	if err != nil {
		t.Fatal(err)
	}
	// The same builder run again knows which Go type each component is.
	if _, err := buildWith(b, api.RouteDocs()); err != nil {
		t.Fatal(err)
	}
	for name, typ := range b.s.byName {
		t.Run(name, func(t *testing.T) {
			sc := doc.Components.Schemas[name]
			if sc == nil {
				t.Fatalf("no component %s", name)
			}
			v := reflect.New(typ).Elem()
			fill(v, 0)
			raw, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			var got any
			json.Unmarshal(raw, &got)
			if err := sc.Value.VisitJSON(got); err != nil {
				t.Fatalf("%s as JSON does not match its schema: %v\n%s", typ, err, raw)
			}
			obj, ok := got.(map[string]any)
			if !ok || sc.Value.Properties == nil {
				return
			}
			for prop := range sc.Value.Properties {
				if _, ok := obj[prop]; !ok {
					t.Errorf("property %s is in the schema, not in %s's JSON", prop, typ)
				}
			}
			obj["no_such_field"] = true
			if err := sc.Value.VisitJSON(obj); err == nil {
				t.Errorf("the schema of %s takes a property it does not declare", typ)
			}
		})
	}
}

// buildWith runs Build's route loop on b (whose schemas then map every
// component to its type).
func buildWith(b *builder, routes []api.RouteDoc) (*openapi3.T, error) {
	doc := &openapi3.T{Paths: openapi3.NewPaths()}
	for _, r := range routes {
		if err := b.route(doc, r); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// fill sets every field of v to a value that is not its zero, as the
// schema would have it (an enum's first value, a size as "1K").
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Type() {
	case byteSizeType, durationType:
		v.SetInt(1024)
		return
	case timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	case rawType:
		v.SetBytes([]byte(`{}`))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fill(v.Field(i), depth+1)
			if enum := f.Tag.Get("enum"); enum != "" {
				first, _, _ := strings.Cut(enum, ",")
				v.Field(i).SetString(first)
			}
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(reflect.ValueOf("K"), e)
		v.Set(m)
	case reflect.String:
		v.SetString("1")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	}
}
