package solve

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/deps"
	"github.com/agentbox/agentbox/internal/deps/depstest"
	"github.com/agentbox/agentbox/internal/egress"
)

// depsEnv is a memEnv whose AddDependency is real admission: the
// operator's manifest, a registry served by the test, fetched through an
// egress proxy, the verified artifact written into the files.
type depsEnv struct {
	*memEnv
	a *deps.Admitter
}

func (e depsEnv) AddDependency(ctx context.Context, spec string) (apitypes.Dependency, error) {
	d, body, err := e.a.Admit(ctx, spec)
	if err != nil {
		return d, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return d, err
	}
	e.files[d.Path] = string(b)
	return d, nil
}

// deniedThenApproved: the coder first asks for a range, is told why not,
// and asks for the approved version.
const deniedThenApproved = `
planner:
  - calls: [{name: submit_plan, args: {files: [calc.py], approach: "pad with pad-it", test: "pytest -q"}}]
coder:
  - calls:
      - {name: add_dependency, args: {spec: "npm:pad-it@^1.0.0"}}
      - {name: edit_file, args: {path: calc.py, old: "return a - b", new: "return a + b"}}
  - expect: ["dependency npm:pad-it@^1.0.0 denied: version", "is not pinned"]
    calls:
      - {name: add_dependency, args: {spec: "npm:pad-it@1.0.0"}}
      - {name: edit_file, args: {path: calc.py, old: "return a - b", new: "return a + b"}}
debugger:
  - expect: ["is not pinned"]
    calls: [{name: submit_diagnosis, args: {hypothesis: "the dependency was asked for as a range", fix: "ask for the exact approved version 1.0.0"}}]
`

func TestDependencyDenied(t *testing.T) {
	pad := depstest.NPMPackage(t, "pad-it", "1.0.0", map[string]string{"index.js": "module.exports = 1;\n"})
	reg := depstest.NewRegistry(t, pad)
	m, err := deps.NewManifest([]deps.Entry{reg.Entry(pad)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := deps.New(deps.Options{Manifest: m, Dial: depstest.Dial(depstest.Proxy(t, egress.Options{})), TempDir: t.TempDir(), RootCAs: reg.Roots()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mem := calcEnv("")
	pass := mem.test
	mem.test = func(f map[string]string) apitypes.ExecOutput {
		if f[".agentbox/deps/pad-it-1.0.0.tgz"] != string(pad.Tarball) {
			return apitypes.ExecOutput{ExitCode: 1, Stderr: "Error: Cannot find module 'pad-it'\n"}
		}
		return pass(f)
	}
	env := depsEnv{memEnv: mem, a: a}
	p := scripted(t, deniedThenApproved)
	j := &MemJournal{}
	s, err := Run(t.Context(), config(p), env, j)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Passed() || s.Iterations != 2 {
		t.Fatalf("stop = %+v", s)
	}
	// The denial is the first attempt's outcome: nothing of that patch
	// was applied, the tests did not run, the reason was recorded.
	var applied []string
	for _, r := range j.Records {
		if r.Kind == KindApplied {
			var msg string
			json.Unmarshal(r.Message, &msg)
			applied = append(applied, msg)
		}
	}
	if len(applied) != 2 || !strings.HasPrefix(applied[0], `dependency npm:pad-it@^1.0.0 denied: version "^1.0.0" is not pinned`) || applied[1] != "" {
		t.Errorf("applied steps: %q", applied)
	}
	if mem.runs != 1 {
		t.Errorf("the tests ran %d times, want once (after the admitted dependency)", mem.runs)
	}
	// The coder's second request carries the reason, as agentbox's
	// feedback on its last call.
	var second Request
	for _, r := range p.Requests() {
		if r.Role == Coder && r.Turn == 1 {
			second = r
		}
	}
	body, _ := json.Marshal(second)
	if !strings.Contains(string(body), "is not pinned: a range or a tag") {
		t.Errorf("the second coder request lacks the denial's reason:\n%s", body)
	}
	var offered bool
	for _, tool := range second.Tools {
		offered = offered || tool.Name == "add_dependency"
	}
	if !offered {
		t.Error("the coder is not offered add_dependency")
	}
}
