package mcpserver

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/client"
)

// TestImports keeps the package an adapter: it reaches agentbox through
// the manager or the Go client, never a sandbox backend, the store or the
// guest directly (STYLE.md, "Surfaces are adapters").
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(out)) {
		for _, banned := range []string{"internal/backend", "internal/store", "internal/guest", "internal/sandbox"} {
			if strings.Contains(imp, "github.com/agentbox/agentbox/"+banned) {
				t.Errorf("mcpserver imports %s", imp)
			}
		}
	}
}

// noBackend answers nothing: the tests here only list tools and check
// arguments, which never reach a backend.
type noBackend struct{ Backend }

type dirBackend struct{ noBackend }

func (dirBackend) UploadDir(context.Context, client.CreateWorkspace, string) (client.Workspace, error) {
	return client.Workspace{}, nil
}

func connect(t *testing.T, b Backend) *mcp.ClientSession {
	t.Helper()
	s := New(b, Options{})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.mcp.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestToolTable checks every tool as a client lists it: a title, a
// description for a model, annotations, and an input schema of an object
// that refuses unknown properties, each property described; from_dir only
// where the backend can upload the caller's directories.
func TestToolTable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       Backend
		fromDir bool
	}{{"daemon", noBackend{}, false}, {"stdio", dirBackend{}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := connect(t, tc.b).ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
				if tool.Title == "" || len(tool.Description) < 100 || tool.Annotations == nil || tool.OutputSchema == nil {
					t.Errorf("%s: title %q, description %q, annotations %v, output schema %v", tool.Name, tool.Title, tool.Description, tool.Annotations, tool.OutputSchema)
				}
				var in struct {
					Type                 string
					Properties           map[string]struct{ Description string }
					Required             []string
					AdditionalProperties any
				}
				b, _ := json.Marshal(tool.InputSchema)
				if err := json.Unmarshal(b, &in); err != nil {
					t.Fatal(err)
				}
				if in.Type != "object" || in.AdditionalProperties == nil {
					t.Errorf("%s: input schema %s", tool.Name, b)
				}
				for name, p := range in.Properties {
					if p.Description == "" {
						t.Errorf("%s.%s: no description", tool.Name, name)
					}
				}
				if _, has := in.Properties["from_dir"]; has != (tc.fromDir && tool.Name == "create_workspace") {
					t.Errorf("%s: from_dir offered: %v", tool.Name, has)
				}
			}
			want := Tools()
			slices.Sort(want)
			if d := cmp.Diff(want, names); d != "" {
				t.Errorf("tools (-table +listed):\n%s", d)
			}
		})
	}
}

// TestArguments: arguments that do not fit a tool's schema are a tool
// error "invalid" naming the problem, before any backend is called.
func TestArguments(t *testing.T) {
	cs := connect(t, noBackend{})
	for _, tc := range []struct {
		tool string
		args any
		has  string
	}{
		{"read_file", map[string]any{"path": "a", "bogus": 1}, `unexpected additional properties ["bogus"]`},
		{"read_file", map[string]any{"path": 7}, "path"},
		{"read_file", map[string]any{}, "path"},
		{"read_file", map[string]any{"path": "a"}, `no workspace given and none bound in this session`},
		{"list_files", map[string]any{"depth": 65}, "maximum"},
		{"fork_workspace", map[string]any{"count": 0}, "minimum"},
		{"find_files", map[string]any{"pattern": "*", "type": "pipe"}, "enum"},
		{"run_command", map[string]any{"command": "true", "env": map[string]any{"A": 1}}, "env"},
		{"create_workspace", map[string]any{"from_dir": "."}, "from_dir"},
		{"create_workspace", map[string]any{"repo": "x", "empty": true}, "exactly one of repo, empty, files"},
		{"create_workspace", map[string]any{"files": map[string]any{}}, "files is empty"},
		{"use_workspace", map[string]any{"workspace": ""}, "workspace is empty"},
	} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.tool, tc.args, err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || !strings.HasPrefix(text, "invalid: ") || !strings.Contains(text, tc.has) {
			t.Errorf("%s %v: %q, want an invalid error with %q", tc.tool, tc.args, text, tc.has)
		}
	}
}

func TestHeadTail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		writes  []string
		written int64 // what the command wrote, as the exec result says
		want    string
		cut     bool
	}{
		{"short", 10, []string{"abc", "def"}, 6, "abcdef", false},
		{"exactly", 6, []string{"abcdef"}, 6, "abcdef", false},
		{"middle left out", 6, []string{"abc", "defgh", "ijk"}, 11, "abc\n[... 5 bytes of stdout left out ...]\nijk", true},
		{"many writes", 4, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}, 9, "12\n[... 5 bytes of stdout left out ...]\n89", true},
		{"dropped past the guest's cap", 10, []string{"abcdef"}, 100, "abcde\n[... 94 bytes of stdout left out ...]\nf", true},
		{"runes whole at the cut", 4, []string{"aé", "xxxxxxxxxx", "éb"}, 16, "a\n[... 14 bytes of stdout left out ...]\nb", true},
		{"runes whole", 6, []string{"aé", "xxxxxxxxxx", "éb"}, 16, "aé\n[... 10 bytes of stdout left out ...]\néb", true},
		{"not UTF-8", 10, []string{"a\xffb"}, 3, "a\uFFFDb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeadTail(tc.max)
			for _, w := range tc.writes {
				h.Write([]byte(w))
			}
			got, cut := h.text("stdout", tc.written)
			if got != tc.want || cut != tc.cut {
				t.Errorf("text = %q, %v; want %q, %v", got, cut, tc.want, tc.cut)
			}
		})
	}
}

func TestTarFiles(t *testing.T) {
	if _, err := tarFiles(map[string]string{"a": strings.Repeat("x", MaxInlineBytes+1)}); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("over the inline bound: %v", err)
	}
	b, err := tarFiles(map[string]string{"b/c.txt": "c", "a.txt": "a"})
	if err != nil || len(b) == 0 {
		t.Errorf("tarFiles: %v", err)
	}
}
