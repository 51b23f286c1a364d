package openapigen

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// schemas builds component schemas from Go types by reflection, the way
// encoding/json reads and writes them:
//
//   - a named struct is a component of its name, every field a property
//     under its json name; embedded structs give their fields;
//   - a field is required unless it is omitempty or omitzero (the server
//     always sends it), or its tag says openapi:"optional" (a request may
//     leave it out though the server prints it);
//   - an enum:"a,b" tag lists a string's values;
//   - a json.RawMessage is any JSON, or the component its schema:"Name"
//     tag names;
//   - objects take no property they do not declare: the server refuses
//     unknown fields in requests, and sends none it does not declare.
type schemas struct {
	docs  *docIndex
	comps openapi3.Schemas
	// names maps each component's Go type to its name, and back.
	names  map[reflect.Type]string
	byName map[string]reflect.Type
}

// named are components that fields refer to by a schema tag.
var named = map[string]reflect.Type{
	"Policy": reflect.TypeFor[apitypes.Policy](),
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	rawType      = reflect.TypeFor[json.RawMessage]()
	byteSizeType = reflect.TypeFor[apitypes.ByteSize]()
	durationType = reflect.TypeFor[apitypes.Duration]()
)

func newSchemas(docs *docIndex) *schemas {
	return &schemas{docs: docs, comps: openapi3.Schemas{}, names: map[reflect.Type]string{}, byName: map[string]reflect.Type{}}
}

func ref(name string) *openapi3.SchemaRef {
	return openapi3.NewSchemaRef("#/components/schemas/"+name, nil)
}

func typed(t string) *openapi3.Schema { return &openapi3.Schema{Type: &openapi3.Types{t}} }

// of returns the schema of Go type t, a reference for a component.
func (s *schemas) of(t reflect.Type) (*openapi3.SchemaRef, error) {
	switch t {
	case timeType:
		sc := typed("string")
		sc.Format = "date-time"
		return openapi3.NewSchemaRef("", sc), nil
	case rawType:
		return openapi3.NewSchemaRef("", &openapi3.Schema{}), nil
	case byteSizeType, durationType:
		return s.component(t, func() (*openapi3.Schema, error) { return s.unit(t) })
	}
	switch t.Kind() {
	case reflect.Pointer:
		return s.of(t.Elem())
	case reflect.Struct:
		if t.Name() == "" {
			sc, err := s.object(t)
			return openapi3.NewSchemaRef("", sc), err
		}
		return s.component(t, func() (*openapi3.Schema, error) { return s.object(t) })
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			sc := typed("string")
			sc.Format = "byte"
			return openapi3.NewSchemaRef("", sc), nil
		}
		items, err := s.of(t.Elem())
		if err != nil {
			return nil, err
		}
		sc := typed("array")
		sc.Items = items
		return openapi3.NewSchemaRef("", sc), nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: map keys must be strings", t)
		}
		sc := typed("object")
		if t.Elem().Kind() != reflect.Interface {
			vals, err := s.of(t.Elem())
			if err != nil {
				return nil, err
			}
			sc.AdditionalProperties = openapi3.AdditionalProperties{Schema: vals}
		}
		return openapi3.NewSchemaRef("", sc), nil
	case reflect.Interface:
		return openapi3.NewSchemaRef("", &openapi3.Schema{}), nil
	case reflect.String:
		return openapi3.NewSchemaRef("", typed("string")), nil
	case reflect.Bool:
		return openapi3.NewSchemaRef("", typed("boolean")), nil
	case reflect.Int, reflect.Int64:
		sc := typed("integer")
		sc.Format = "int64"
		return openapi3.NewSchemaRef("", sc), nil
	case reflect.Int32:
		sc := typed("integer")
		sc.Format = "int32"
		return openapi3.NewSchemaRef("", sc), nil
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		sc := typed("integer")
		sc.Min = openapi3.Float64Ptr(0)
		if bits := t.Bits(); bits < 64 {
			sc.Max = openapi3.Float64Ptr(float64(uint64(1)<<bits - 1))
		}
		return openapi3.NewSchemaRef("", sc), nil
	case reflect.Float32, reflect.Float64:
		sc := typed("number")
		sc.Format = "double"
		return openapi3.NewSchemaRef("", sc), nil
	}
	return nil, fmt.Errorf("%s: no schema for kind %s", t, t.Kind())
}

// component returns a reference to t's component, made by build the first
// time.
func (s *schemas) component(t reflect.Type, build func() (*openapi3.Schema, error)) (*openapi3.SchemaRef, error) {
	if name, ok := s.names[t]; ok {
		return ref(name), nil
	}
	name := t.Name()
	if other, ok := s.byName[name]; ok {
		return nil, fmt.Errorf("component %s: both %s and %s", name, other, t)
	}
	s.names[t], s.byName[name] = name, t
	sc, err := build()
	if err != nil {
		return nil, err
	}
	td, err := s.docs.lookup(t.PkgPath(), t.Name())
	if err != nil {
		return nil, err
	}
	if sc.Description == "" {
		sc.Description = td.doc
	}
	s.comps[name] = openapi3.NewSchemaRef("", sc)
	return ref(name), nil
}

// unit is the schema of a size or a duration: a string with a unit, or a
// number.
func (s *schemas) unit(t reflect.Type) (*openapi3.Schema, error) {
	str := typed("string")
	num := typed("integer")
	if t == durationType {
		str.Description = `a Go duration: "30s", "90m", "2h"`
		num = typed("number")
		num.Description = "seconds"
	} else {
		str.Description = `bytes with a binary unit: "512M", "1.5G", "100k", "2GiB", "1024"`
		str.Pattern = `^[0-9]+(\.[0-9]+)?([kmgtKMGT][iI]?)?[bB]?$`
		num.Description = "bytes"
	}
	num.Min = openapi3.Float64Ptr(0)
	return &openapi3.Schema{OneOf: openapi3.SchemaRefs{openapi3.NewSchemaRef("", str), openapi3.NewSchemaRef("", num)}}, nil
}

// field is one JSON property of a struct.
type field struct {
	name     string
	required bool
	schema   *openapi3.SchemaRef
}

// object is the schema of struct type t.
func (s *schemas) object(t reflect.Type) (*openapi3.Schema, error) {
	fields, err := s.fields(t)
	if err != nil {
		return nil, err
	}
	sc := typed("object")
	sc.Properties = openapi3.Schemas{}
	sc.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
	for _, f := range fields {
		if _, dup := sc.Properties[f.name]; dup {
			return nil, fmt.Errorf("%s: property %s twice", t, f.name)
		}
		sc.Properties[f.name] = f.schema
		if f.required {
			sc.Required = append(sc.Required, f.name)
		}
	}
	return sc, nil
}

func (s *schemas) fields(t reflect.Type) ([]field, error) {
	td, err := s.docs.lookup(t.PkgPath(), t.Name())
	if err != nil {
		return nil, err
	}
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded, err := s.fields(ft)
				if err != nil {
					return nil, err
				}
				out = append(out, embedded...)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		f := field{name: name, required: true}
		for _, o := range strings.Split(opts, ",") {
			if o == "omitempty" || o == "omitzero" {
				f.required = false
			}
		}
		if sf.Tag.Get("openapi") == "optional" {
			f.required = false
		}
		if comp := sf.Tag.Get("schema"); comp != "" {
			ct, ok := named[comp]
			if !ok {
				return nil, fmt.Errorf("%s.%s: no component %q for its schema tag", t, sf.Name, comp)
			}
			if f.schema, err = s.of(ct); err != nil {
				return nil, err
			}
		} else if f.schema, err = s.of(sf.Type); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t, sf.Name, err)
		}
		if enum := sf.Tag.Get("enum"); enum != "" {
			if f.schema.Ref != "" || f.schema.Value.Type == nil || !f.schema.Value.Type.Is("string") {
				return nil, fmt.Errorf("%s.%s: an enum tag on a field that is not a string", t, sf.Name)
			}
			for _, v := range strings.Split(enum, ",") {
				f.schema.Value.Enum = append(f.schema.Value.Enum, v)
			}
		}
		desc := td.fields[sf.Name]
		nullable := sf.Type.Kind() == reflect.Pointer && f.required
		switch {
		case f.schema.Ref != "" && (desc != "" || nullable):
			// A reference takes no siblings in OpenAPI 3.0.
			f.schema = openapi3.NewSchemaRef("", &openapi3.Schema{AllOf: openapi3.SchemaRefs{f.schema}, Description: desc, Nullable: nullable})
		case f.schema.Ref == "":
			f.schema.Value.Description = desc
			f.schema.Value.Nullable = nullable
		}
		out = append(out, f)
	}
	return out, nil
}
