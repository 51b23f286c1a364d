package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// toJSON turns a policy document into JSON with no duplicate keys and
// nothing after the document, or says why it cannot. JSON (a document
// starting with '{' or '[') is read as JSON: read as YAML, trailing data
// would be ignored and some escapes refused. Everything else is YAML.
func toJSON(data []byte) ([]byte, error) {
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("the document is %d bytes, over the limit of %d", len(data), MaxDocumentBytes)
	}
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a byte order mark
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		if err := checkJSON(data); err != nil {
			return nil, fmt.Errorf("JSON %w", err)
		}
		return data, nil
	}
	if err := checkYAMLShape(data); err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		// go-yaml reports several problems on several lines.
		return nil, errors.New(strings.Join(strings.Fields(err.Error()), " "))
	}
	return j, nil
}

// maxJSONDepth is far deeper than any policy (four levels) and far
// shallower than a stack overflow.
const maxJSONDepth = 32

// checkJSON walks the tokens of data, refusing duplicate keys, nesting
// beyond maxJSONDepth and anything after the document.
func checkJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walkJSON(dec, "", 0)
	if err == nil {
		if _, end := dec.Token(); end != io.EOF {
			err = fmt.Errorf("at byte %d: more data after the document", dec.InputOffset())
		}
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		line, col := position(data, syn.Offset)
		return fmt.Errorf("line %d, column %d: %s", line, col, strings.TrimPrefix(syn.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("the document ends early")
	}
	return err
}

func walkJSON(dec *json.Decoder, path string, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth >= maxJSONDepth {
		return fmt.Errorf("%s: nested more than %d levels", fieldName(path), maxJSONDepth)
	}
	switch delim {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key := tok.(string)
			if seen[key] {
				return fmt.Errorf("%s: duplicate key", fieldName(join(path, key)))
			}
			seen[key] = true
			if err := walkJSON(dec, join(path, key), depth+1); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := walkJSON(dec, index(path, i), depth+1); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, offset int64) (int, int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	return line, int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
}

// yamlMarker matches a YAML document start or end marker line.
var yamlMarker = regexp.MustCompile(`^(---|\.\.\.)([ \t].*)?$`)

// checkYAMLShape refuses what go-yaml would read only part of, silently
// dropping the rest and so making a policy quietly different from the
// file: a second document, and a top-level flow collection ("{...}" after
// a comment), after which go-yaml ignores the remaining input.
func checkYAMLShape(data []byte) error {
	// node: the top-level node has begun; ended: "..." was seen.
	node, ended := false, false
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if m := yamlMarker.FindStringSubmatch(line); m != nil {
			if m[1] == "..." {
				ended = true
				continue
			}
			if node || ended {
				return fmt.Errorf("line %d: a second YAML document; a policy is one document", i+1)
			}
			trimmed = strings.TrimSpace(m[2])
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
		}
		switch {
		case ended:
			return fmt.Errorf("line %d: content after the end of the YAML document", i+1)
		case node:
			continue
		case strings.HasPrefix(line, "%"):
			continue // a directive
		}
		rest := skipNodeProperties(trimmed)
		if strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, "[") {
			return fmt.Errorf(`line %d: write a YAML policy as "key: value" lines, or the whole policy as JSON`, i+1)
		}
		node = rest != ""
	}
	return nil
}

// skipNodeProperties skips the tags ("!!map") and anchors ("&a") a YAML
// node may start with.
func skipNodeProperties(s string) string {
	for strings.HasPrefix(s, "!") || strings.HasPrefix(s, "&") {
		i := strings.IndexAny(s, " \t")
		if i < 0 {
			return ""
		}
		s = strings.TrimLeft(s[i:], " \t")
	}
	return s
}

// decoder reads a policy from JSON field by field, so that every problem
// is reported with its path ("limits.memory") and unknown or misspelt
// fields are found at any depth.
type decoder struct {
	problems []string
}

func (d *decoder) fail(path, format string, args ...any) {
	d.problems = append(d.problems, fieldName(path)+": "+fmt.Sprintf(format, args...))
}

// failValue reports a value that is there but wrong, showing it as it was
// written in JSON: `limits.memory "12X": ...`.
func (d *decoder) failValue(path string, raw json.RawMessage, reason string) {
	shown := string(bytes.TrimSpace(raw))
	if len(shown) > 80 {
		shown = strings.ToValidUTF8(shown[:80], "") + "..."
	}
	d.problems = append(d.problems, fieldName(path)+" "+shown+": "+reason)
}

// object decodes an object into its members; null is an empty object.
func (d *decoder) object(path string, raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		d.fail(path, "want an object, not %s", jsonKind(raw))
		return nil, false
	}
	return m, true
}

// fields decodes an object with a fixed set of fields.
func (d *decoder) fields(path string, raw json.RawMessage, fields map[string]func(path string, raw json.RawMessage)) {
	m, ok := d.object(path, raw)
	if !ok {
		return
	}
	known := slices.Sorted(maps.Keys(fields))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		decode, ok := fields[k]
		if !ok {
			d.fail(join(path, k), "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		decode(join(path, k), m[k])
	}
}

func (d *decoder) string(dst *string) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if err := json.Unmarshal(raw, dst); err != nil {
			d.fail(path, "want a string, not %s", jsonKind(raw))
		}
	}
}

func (d *decoder) strings(dst *[]string) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			d.fail(path, "want a list of strings, not %s", jsonKind(raw))
			return
		}
		*dst = make([]string, len(items))
		for i, item := range items {
			if err := json.Unmarshal(item, &(*dst)[i]); err != nil || jsonKind(item) == "null" {
				d.fail(index(path, i), "want a string, not %s", jsonKind(item))
			}
		}
	}
}

func (d *decoder) stringMap(dst *map[string]string) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		m, ok := d.object(path, raw)
		if !ok {
			return
		}
		*dst = make(map[string]string, len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			var s string
			if err := json.Unmarshal(m[k], &s); err != nil || jsonKind(m[k]) == "null" {
				d.fail(join(path, k), "want a string, not %s (quote numbers and booleans)", jsonKind(m[k]))
				continue
			}
			(*dst)[k] = s
		}
	}
}

func (d *decoder) number(dst *float64) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if err := json.Unmarshal(raw, dst); err != nil {
			if kind := jsonKind(raw); kind != "a number" {
				d.fail(path, "want a number, not %s", kind)
			} else {
				d.fail(path, "out of range")
			}
		}
	}
}

func (d *decoder) integer(dst *int64) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if jsonKind(raw) == "null" {
			return
		}
		n, reason := decodeNumber(raw, "want a whole number")
		switch {
		case reason != "":
			d.fail(path, "%s", reason)
		case !n.IsInt():
			d.fail(path, "want a whole number, not %s", n.FloatString(3))
		case !n.Num().IsInt64():
			d.fail(path, "too large")
		default:
			*dst = n.Num().Int64() // Validate reports a negative one
		}
	}
}

func (d *decoder) byteSize(dst *ByteSize) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if jsonKind(raw) == "null" {
			return
		}
		v, reason := decodeByteSize(raw)
		if reason != "" {
			d.failValue(path, raw, reason)
			return
		}
		*dst = v
	}
}

func (d *decoder) duration(dst *Duration) func(string, json.RawMessage) {
	return func(path string, raw json.RawMessage) {
		if jsonKind(raw) == "null" {
			return
		}
		v, reason := decodeDuration(raw)
		if reason != "" {
			d.failValue(path, raw, reason)
			return
		}
		*dst = v
	}
}

// policy decodes the whole document into p.
func (d *decoder) policy(raw json.RawMessage, p *Policy) {
	d.fields("", raw, map[string]func(string, json.RawMessage){
		"network": func(path string, raw json.RawMessage) {
			d.fields(path, raw, map[string]func(string, json.RawMessage){
				"mode":  d.string(&p.Network.Mode),
				"allow": d.strings(&p.Network.Allow),
			})
		},
		"secrets": func(path string, raw json.RawMessage) {
			m, ok := d.object(path, raw)
			if !ok {
				return
			}
			p.Secrets = make(map[string]SecretBinding, len(m))
			for _, name := range slices.Sorted(maps.Keys(m)) {
				var b SecretBinding
				d.fields(join(path, name), m[name], map[string]func(string, json.RawMessage){
					"hosts":  d.strings(&b.Hosts),
					"header": d.string(&b.Header),
					"format": d.string(&b.Format),
				})
				p.Secrets[name] = b
			}
		},
		"env": d.stringMap(&p.Env),
		"limits": func(path string, raw json.RawMessage) {
			l := &p.Limits
			d.fields(path, raw, map[string]func(string, json.RawMessage){
				"cpus":            d.number(&l.CPUs),
				"memory":          d.byteSize(&l.Memory),
				"pids":            d.integer(&l.Pids),
				"disk":            d.byteSize(&l.Disk),
				"tmp":             d.byteSize(&l.Tmp),
				"exec_timeout":    d.duration(&l.ExecTimeout),
				"sandbox_timeout": d.duration(&l.SandboxTimeout),
				"output_bytes":    d.byteSize(&l.OutputBytes),
			})
		},
		"writable_paths": d.strings(&p.WritablePaths),
		"runtime_class":  d.string(&p.RuntimeClass),
	})
}

// jsonKind names the kind of a JSON value for "want X, not Y" messages.
func jsonKind(raw json.RawMessage) string { return apitypes.JSONKind(raw) }

// identRE is a map key that reads well after a dot in a path.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// join appends a field or map key to a path: "secrets.GITHUB_TOKEN",
// or secrets["odd name"] when the key would not read as one.
func join(path, key string) string {
	if !identRE.MatchString(key) {
		return path + "[" + quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a list index to a path: "network.allow[2]".
func index(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// fieldName is the path as shown to users; the document itself is
// "policy".
func fieldName(path string) string {
	if path == "" || strings.HasPrefix(path, "[") {
		return "policy" + path
	}
	return path
}
