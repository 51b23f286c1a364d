package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// fixture is testdata/policy.yaml and testdata/policy.json, canonical.
var fixture = Policy{
	Network: Network{
		Mode:  ModeAllowlist,
		Allow: []string{"api.github.com:443", "*.pythonhosted.org", "pypi.org", "xn--bcher-kva.de"},
	},
	Secrets: map[string]SecretBinding{
		"GITHUB_TOKEN": {Hosts: []string{"api.github.com:443"}, Header: "Authorization", Format: "Bearer {{value}}"},
		"PYPI_TOKEN":   {Hosts: []string{"upload.pythonhosted.org"}, Header: "X-Pypi-Token", Format: "{{value}}"},
	},
	Env: map[string]string{"CI": "1", "LANG": "C.UTF-8"},
	Limits: Limits{
		CPUs:           1.5,
		Memory:         2 << 30,
		Pids:           1024,
		Disk:           10 << 30,
		Tmp:            512 << 20,
		ExecTimeout:    Duration(30 * time.Minute),
		SandboxTimeout: Duration(2 * time.Hour),
		OutputBytes:    16 << 20,
	},
	WritablePaths: []string{"src/**", "**/*.pyc"},
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestYAMLAndJSONParseEqual parses the same policy written in YAML and in
// JSON (with different spellings of the same values) to one canonical
// policy, which survives JSON and YAML round trips.
func TestYAMLAndJSONParseEqual(t *testing.T) {
	for _, name := range []string{"policy.yaml", "policy.json"} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(readFixture(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fixture, got); diff != "" {
				t.Fatalf("Parse(%s) (-want +got):\n%s", name, diff)
			}
			if err := got.Validate(DefaultCeilings()); err != nil {
				t.Errorf("Validate: %v", err)
			}
			j, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			y, err := yaml.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range [][]byte{j, y} {
				again, err := Parse(doc)
				if err != nil {
					t.Fatalf("Parse(%s): %v", doc, err)
				}
				if diff := cmp.Diff(got, again); diff != "" {
					t.Errorf("re-parsed %s (-first +again):\n%s", doc, diff)
				}
			}
		})
	}
}

func TestParseAccepted(t *testing.T) {
	none := Policy{Network: Network{Mode: ModeNone}}
	tests := []struct {
		name string
		doc  string
		want Policy
	}{
		{"empty document", "", none},
		{"only a comment", "# nothing\n", none},
		{"empty JSON object", "{}", none},
		{"JSON with whitespace", " \n\t{ }\n ", none},
		{"byte order mark", "\ufeffnetwork: {mode: none}", none},
		{"YAML directive", "%YAML 1.1\n---\nnetwork: {mode: none}\n", none},
		{"YAML tag on the document", "--- !!map\nnetwork: {mode: none}\n", none},
		{"YAML document start", "---\nnetwork: {mode: none}\n", none},
		{"YAML document end", "network:\n  mode: none\n...\n# done\n", none},
		{"nulls", "network: null\nsecrets: null\nenv: null\nlimits: null\nwritable_paths: null\n", none},
		{"empty lists and maps", `{"network": {"allow": []}, "secrets": {}, "env": {}, "limits": {}, "writable_paths": []}`, none},
		{"explicit none", "network: {mode: none}", none},
		{"allowlist canonicalised", "network:\n  mode: allowlist\n  allow: [Example.COM., '*.Example.org:8443', bücher.de]\n",
			Policy{Network: Network{Mode: ModeAllowlist, Allow: []string{"example.com", "*.example.org:8443", "xn--bcher-kva.de"}}}},
		{"secret defaults", "network: {mode: allowlist, allow: [api.example.com]}\nsecrets: {API_KEY: {hosts: [api.example.com]}}\n",
			Policy{
				Network: Network{Mode: ModeAllowlist, Allow: []string{"api.example.com"}},
				Secrets: map[string]SecretBinding{"API_KEY": {Hosts: []string{"api.example.com"}, Header: "Authorization", Format: "{{value}}"}},
			}},
		{"secret under a wildcard, header canonicalised", "network: {mode: allowlist, allow: ['*.example.com']}\nsecrets: {K: {hosts: [a.example.com:443, '*.b.example.com'], header: x-api-key, format: 'token={{value}}'}}\n",
			Policy{
				Network: Network{Mode: ModeAllowlist, Allow: []string{"*.example.com"}},
				Secrets: map[string]SecretBinding{"K": {Hosts: []string{"a.example.com:443", "*.b.example.com"}, Header: "X-Api-Key", Format: "token={{value}}"}},
			}},
		{"secret on one of two ports", "network: {mode: allowlist, allow: ['example.com:443']}\nsecrets: {K: {hosts: [example.com]}}\n",
			Policy{
				Network: Network{Mode: ModeAllowlist, Allow: []string{"example.com:443"}},
				Secrets: map[string]SecretBinding{"K": {Hosts: []string{"example.com"}, Header: "Authorization", Format: "{{value}}"}},
			}},
		{"env", "env: {lower_case: x, _X: '', PATH: /usr/bin, agentbox_lower: z, EMPTY: ''}\n",
			Policy{Network: Network{Mode: ModeNone}, Env: map[string]string{"lower_case": "x", "_X": "", "PATH": "/usr/bin", "agentbox_lower": "z", "EMPTY": ""}}},
		{"limits at their floors", "limits: {cpus: 0.01, memory: 16M, pids: 32, disk: 1M, tmp: 1M, exec_timeout: 1ns, sandbox_timeout: 1, output_bytes: 1}\n",
			Policy{Network: Network{Mode: ModeNone}, Limits: Limits{CPUs: 0.01, Memory: 16 << 20, Pids: 32, Disk: 1 << 20, Tmp: 1 << 20, ExecTimeout: 1, SandboxTimeout: Duration(time.Second), OutputBytes: 1}}},
		{"tmp equal to memory", "limits: {memory: 1G, tmp: 1024M}\n",
			Policy{Network: Network{Mode: ModeNone}, Limits: Limits{Memory: 1 << 30, Tmp: 1 << 30}}},
		{"tmp without memory", "limits: {tmp: 2G}\n",
			Policy{Network: Network{Mode: ModeNone}, Limits: Limits{Tmp: 2 << 30}}},
		{"writable paths", "writable_paths: ['**', 'src/**/*.go', '.cache/*']\n",
			Policy{Network: Network{Mode: ModeNone}, WritablePaths: []string{"**", "src/**/*.go", ".cache/*"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRefused(t *testing.T) {
	allow := "network: {mode: allowlist, allow: [api.github.com:443, '*.example.com']}\n"
	secret := func(binding string) string { return allow + "secrets: {GITHUB_TOKEN: " + binding + "}\n" }
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	tests := []struct {
		name    string
		doc     string
		wantErr string
	}{
		// The document.
		{"too large", "env: {A: '" + strings.Repeat("x", MaxDocumentBytes) + "'}", "over the limit of 1048576"},
		{"runtime class not a name", "runtime_class: Bad_Class", `runtime_class "Bad_Class": not a Kubernetes object name`},
		{"unknown field", "networks: {}", "networks: unknown field (known: env, limits, network, runtime_class, secrets, writable_paths)"},
		{"field in another case", "Network: {}", "Network: unknown field"},
		{"unknown network field", "network: {mode: none, alow: []}", "network.alow: unknown field (known: allow, mode)"},
		{"unknown secret field", secret("{hosts: [api.github.com:443], headr: X}"), "secrets.GITHUB_TOKEN.headr: unknown field"},
		{"unknown limit", "limits: {memroy: 1G}", "limits.memroy: unknown field"},
		{"duplicate YAML key", "network: {}\nnetwork: {}\n", `key "network" already set in map`},
		{"duplicate nested YAML key", "env:\n  A: x\n  A: y\n", `key "A" already set in map`},
		{"duplicate JSON key", `{"network": {}, "network": {}}`, "network: duplicate key"},
		{"duplicate nested JSON key", `{"env": {"A": "1", "B": "2", "A": "3"}}`, "env.A: duplicate key"},
		{"trailing JSON document", `{} {}`, "more data after the document"},
		{"trailing JSON garbage", `{"env": {}}x`, "more data after the document"},
		{"JSON syntax", "{\n  \"network\": }", "JSON line 2, column 14: invalid character '}'"},
		{"JSON cut short", `{"network": {`, "the document ends early"},
		{"JSON nested too deep", `{"x": ` + deep + `}`, "nested more than 32 levels"},
		{"second YAML document", "env: {A: x}\n---\nenv: {B: y}\n", "line 2: a second YAML document"},
		{"YAML after the end", "env: {A: x}\n...\nenv: {B: y}\n", "line 3: content after the end"},
		{"YAML syntax", "network: [\n", "yaml: line 1"},
		{"YAML flow mapping with trailing data", "# policy\n{network: {mode: none}} x", `line 2: write a YAML policy as "key: value" lines`},
		{"YAML flow after a marker", "--- {a: 1} x", `line 1: write a YAML policy as "key: value" lines`},
		{"YAML flow after a tag", "!!map\n{a: 1} x", `line 2: write a YAML policy as "key: value" lines`},
		{"YAML flow after an anchor", "&x [1] x", `line 1: write a YAML policy as "key: value" lines`},
		{"YAML document after a marker line", "env: {A: x}\n--- {B: y}\n", "line 2: a second YAML document"},
		{"byte order mark and trailing JSON", "\ufeff{} x", "more data after the document"},
		{"a list", "[1, 2]", "policy: want an object, not a list"},
		{"a string", "hello", "policy: want an object, not a string"},

		// Types.
		{"mode not a string", "network: {mode: 1}", "network.mode: want a string, not a number"},
		{"allow not a list", "network: {allow: example.com}", "network.allow: want a list of strings, not a string"},
		{"allow entry not a string", `{"network": {"allow": ["a.com", 1, null]}}`, "network.allow[1]: want a string, not a number; network.allow[2]: want a string, not null"},
		{"secrets not an object", "secrets: [A]", "secrets: want an object, not a list"},
		{"env value a number", "env: {A: 1}", "env.A: want a string, not a number (quote numbers and booleans)"},
		{"env value a boolean", "env: {A: yes}", "env.A: want a string, not a boolean"},
		{"cpus a string", `limits: {cpus: "2"}`, "limits.cpus: want a number, not a string"},
		{"cpus out of range", `{"limits": {"cpus": 1e400}}`, "limits.cpus: out of range"},
		{"pids a fraction", "limits: {pids: 1.5}", "limits.pids: want a whole number, not 1.500"},
		{"pids a string", "limits: {pids: many}", "limits.pids: want a whole number, not a string"},
		{"pids too large", `{"limits": {"pids": 9223372036854775808}}`, "limits.pids: too large"},
		{"memory not a size", "limits: {memory: 12X}", `limits.memory "12X": want a number of bytes or a number with a unit K, M, G or T`},
		{"memory negative", "limits: {memory: -1}", "limits.memory -1: a size cannot be negative"},
		{"duration in days", "limits: {exec_timeout: 7d}", `limits.exec_timeout "7d": want a duration like "30s"`},
		{"duration negative", "limits: {sandbox_timeout: -5s}", `limits.sandbox_timeout "-5s": a duration cannot be negative`},

		// Network.
		{"unknown mode", "network: {mode: open}", `network.mode "open": want "none" or "allowlist"`},
		{"mode none with entries", "network: {mode: none, allow: [example.com]}", `network.allow: network.mode is "none", so these entries would never be used`},
		{"default mode with entries", "network: {allow: [example.com]}", `network.allow: network.mode is "none"`},
		{"allowlist without entries", "network: {mode: allowlist}", `network.allow: network.mode is "allowlist" but the list is empty`},
		{"bad wildcard", "network: {mode: allowlist, allow: [a.com, b.com, '*.foo*.com']}",
			`network.allow[2] "*.foo*.com": a wildcard must be the whole first label, as in "*.example.com"`},
		{"IP address", "network: {mode: allowlist, allow: [10.0.0.1]}", `network.allow[0] "10.0.0.1": IP addresses are not allowed: a policy names hosts`},
		{"URL", "network: {mode: allowlist, allow: ['https://example.com/']}", `network.allow[0] "https://example.com/": a host, not a URL`},
		{"duplicate entry", "network: {mode: allowlist, allow: [example.com, Example.COM.]}", `network.allow[1] "Example.COM.": the same as network.allow[0]`},

		// Secrets.
		{"lower case secret name", allow + "secrets: {github_token: {hosts: [api.github.com]}}", "secrets.github_token: secret names are 1 to 64 upper case letters"},
		{"secret name with a space", allow + "secrets: {'MY TOKEN': {hosts: [api.github.com]}}", `secrets["MY TOKEN"]: secret names are`},
		{"long secret name", allow + "secrets: {A" + strings.Repeat("B", 64) + ": {hosts: [api.github.com]}}", "secret names are 1 to 64"},
		{"AGENTBOX_ secret", allow + "secrets: {AGENTBOX_TOKEN: {hosts: [api.github.com]}}", "secrets.AGENTBOX_TOKEN: names starting with AGENTBOX_ are reserved"},
		{"proxy secret", allow + "secrets: {HTTPS_PROXY: {hosts: [api.github.com]}}", "secrets.HTTPS_PROXY: agentbox sets HTTPS_PROXY itself"},
		{"secret without hosts", secret("{format: 'Bearer {{value}}'}"), "secrets.GITHUB_TOKEN.hosts: bind the secret to at least one host"},
		{"secret host a URL", secret("{hosts: ['https://api.github.com']}"), `secrets.GITHUB_TOKEN.hosts[0] "https://api.github.com": a host, not a URL`},
		{"secret host not allowed", secret("{hosts: [api.github.com:443, evil.com]}"), `secrets.GITHUB_TOKEN.hosts[1] "evil.com": network.allow does not allow this host and port`},
		{"secret port not allowed", secret("{hosts: ['api.github.com:80']}"), `secrets.GITHUB_TOKEN.hosts[0] "api.github.com:80": network.allow does not allow`},
		{"secret wider than a wildcard", secret("{hosts: [example.com]}"), `secrets.GITHUB_TOKEN.hosts[0] "example.com": network.allow does not allow`},
		{"secret with no network", "secrets: {GITHUB_TOKEN: {hosts: [api.github.com]}}", `secrets.GITHUB_TOKEN.hosts[0] "api.github.com": the network is closed`},
		{"duplicate secret host", secret("{hosts: [api.github.com:443, API.github.com.:443]}"), `secrets.GITHUB_TOKEN.hosts[1] "API.github.com.:443": the same as secrets.GITHUB_TOKEN.hosts[0]`},
		{"header not a token", secret("{hosts: [api.github.com:443], header: 'X Token'}"), `secrets.GITHUB_TOKEN.header "X Token": not a valid HTTP header name`},
		{"header with a colon", secret("{hosts: [api.github.com:443], header: 'X-Token:'}"), `not a valid HTTP header name`},
		{"Host header", secret("{hosts: [api.github.com:443], header: Host}"), `secrets.GITHUB_TOKEN.header "Host": hop-by-hop, proxy and framing headers cannot carry a secret`},
		{"Connection header", secret("{hosts: [api.github.com:443], header: connection}"), `header "connection": hop-by-hop`},
		{"Proxy-Authorization header", secret("{hosts: [api.github.com:443], header: Proxy-Authorization}"), `header "Proxy-Authorization": hop-by-hop`},
		{"Proxy-anything header", secret("{hosts: [api.github.com:443], header: proxy-x}"), `header "proxy-x": hop-by-hop`},
		{"Transfer-Encoding header", secret("{hosts: [api.github.com:443], header: Transfer-Encoding}"), `header "Transfer-Encoding": hop-by-hop`},
		{"Upgrade header", secret("{hosts: [api.github.com:443], header: UPGRADE}"), `header "UPGRADE": hop-by-hop`},
		{"Content-Length header", secret("{hosts: [api.github.com:443], header: content-length}"), `header "content-length": hop-by-hop`},
		{"TE header", secret("{hosts: [api.github.com:443], header: TE}"), `header "TE": hop-by-hop`},
		{"Trailer header", secret("{hosts: [api.github.com:443], header: Trailer}"), `header "Trailer": hop-by-hop`},
		{"Keep-Alive header", secret("{hosts: [api.github.com:443], header: keep-alive}"), `header "keep-alive": hop-by-hop`},
		{"format without the value", secret("{hosts: [api.github.com:443], format: Bearer}"), `secrets.GITHUB_TOKEN.format "Bearer": must contain {{value}} exactly once`},
		{"format with the value twice", secret("{hosts: [api.github.com:443], format: '{{value}}{{value}}'}"), `must contain {{value}} exactly once`},
		{"format with a line break", secret(`{hosts: [api.github.com:443], format: "{{value}}\r\nX-Evil: 1"}`), `secrets.GITHUB_TOKEN.format "{{value}}\r\nX-Evil: 1": must be printable ASCII`},

		// Environment.
		{"env name with a dash", "env: {A-B: x}", `env["A-B"]: variable names are letters, digits and '_'`},
		{"env name starting with a digit", "env: {1A: x}", `env["1A"]: variable names`},
		{"env AGENTBOX_", "env: {AGENTBOX_X: x}", "env.AGENTBOX_X: names starting with AGENTBOX_ are reserved"},
		{"env HTTP_PROXY", "env: {HTTP_PROXY: x}", "env.HTTP_PROXY: agentbox sets HTTP_PROXY itself"},
		{"env https_proxy", "env: {https_proxy: x}", "env.https_proxy: agentbox sets https_proxy itself"},
		{"env No_Proxy", "env: {No_Proxy: x}", "env.No_Proxy: agentbox sets"},
		{"env ALL_PROXY", "env: {ALL_PROXY: x}", "env.ALL_PROXY: agentbox sets"},
		{"env a secret's name", secret("{hosts: [api.github.com:443]}") + "env: {GITHUB_TOKEN: x}", "env.GITHUB_TOKEN: secrets.GITHUB_TOKEN sets this variable"},
		{"env NUL", `{"env": {"A": "x\u0000y"}}`, "env.A: values cannot contain NUL bytes"},

		// Limits.
		{"negative cpus", "limits: {cpus: -1}", "limits.cpus: cannot be negative"},
		{"tiny cpus", "limits: {cpus: 0.001}", "limits.cpus 0.001 is under the minimum of 0.01"},
		{"small memory", "limits: {memory: 1M}", "limits.memory 1M is under the minimum of 16M"},
		{"negative pids", "limits: {pids: -1}", "limits.pids: cannot be negative"},
		{"few pids", "limits: {pids: 8}", "limits.pids 8 is under the minimum of 32"},
		{"small disk", "limits: {disk: 1K}", "limits.disk 1K is under the minimum of 1M"},
		{"small tmp", "limits: {tmp: 1000}", "limits.tmp 1000 is under the minimum of 1M"},
		{"tmp over memory", "limits: {memory: 1G, tmp: 2G}", "limits.tmp 2G is over limits.memory 1G (/tmp is held in memory)"},

		// Writable paths.
		{"path leaving the workspace", "writable_paths: [src/**, ../x]", `writable_paths[1] "../x": ".." would leave the workspace`},
		{"absolute path", "writable_paths: [/etc/**]", `writable_paths[0] "/etc/**": absolute`},
		{"bad pattern", "writable_paths: ['a[']", `writable_paths[0] "a[": not a valid pattern`},
		{"duplicate path", "writable_paths: [a, b, a]", `writable_paths[2] "a": the same as writable_paths[0]`},

		// Several problems, in document order, map keys sorted.
		{"all problems", "network: {mode: none, allow: [x.com]}\nenv: {Z-Z: x, AGENTBOX_A: z}\nlimits: {pids: 1}\n",
			`network.allow: network.mode is "none", so these entries would never be used: set network.mode to "allowlist"; ` +
				"env.AGENTBOX_A: names starting with AGENTBOX_ are reserved; " +
				`env["Z-Z"]: variable names are letters, digits and '_', not starting with a digit; ` +
				"limits.pids 1 is under the minimum of 32 (the guest and its per-exec reapers need threads too): invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", got)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("error %v is not of the invalid class", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error\n  %v\ndoes not contain\n  %s", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error has more than one line: %q", err)
			}
		})
	}
}

func TestManyProblemsAreCut(t *testing.T) {
	var b strings.Builder
	b.WriteString("env:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  AGENTBOX_%02d: x\n", i)
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "env.AGENTBOX_19: names") || !strings.Contains(err.Error(), "; and 10 more") || strings.Contains(err.Error(), "AGENTBOX_20") {
		t.Errorf("Parse = %v; want the first 20 problems and a count of the rest", err)
	}
}

func TestValidateCeilings(t *testing.T) {
	hosts := func(n int) []string {
		var h []string
		for i := range n {
			h = append(h, fmt.Sprintf("h%d.example.com", i))
		}
		return h
	}
	vars := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("V%d", i)] = "x"
		}
		return m
	}
	secrets := func(n int) map[string]SecretBinding {
		m := map[string]SecretBinding{}
		for i := range n {
			m[fmt.Sprintf("S%d", i)] = SecretBinding{Hosts: []string{"h0.example.com"}}
		}
		return m
	}
	tests := []struct {
		name    string
		p       Policy
		wantErr string
	}{
		{name: "at every ceiling", p: Policy{
			Network: Network{Mode: ModeAllowlist, Allow: hosts(256)},
			Secrets: secrets(64),
			Env:     vars(256),
			Limits: Limits{CPUs: 2, Memory: 8 << 30, Pids: 4096, Disk: 20 << 30, Tmp: 4 << 30,
				ExecTimeout: Duration(24 * time.Hour), SandboxTimeout: Duration(7 * 24 * time.Hour), OutputBytes: 1 << 30},
		}},
		{name: "cpus", p: Policy{Limits: Limits{CPUs: 4}}, wantErr: "limits.cpus 4 is over the daemon's ceiling of 2"},
		{name: "memory", p: Policy{Limits: Limits{Memory: 64 << 30}}, wantErr: "limits.memory 64G is over the daemon's ceiling of 8G"},
		{name: "pids", p: Policy{Limits: Limits{Pids: 4097}}, wantErr: "limits.pids 4097 is over the daemon's ceiling of 4096"},
		{name: "disk", p: Policy{Limits: Limits{Disk: 21 << 30}}, wantErr: "limits.disk 21G is over the daemon's ceiling of 20G"},
		{name: "tmp", p: Policy{Limits: Limits{Tmp: 5 << 30}}, wantErr: "limits.tmp 5G is over the daemon's ceiling of 4G"},
		{name: "exec timeout", p: Policy{Limits: Limits{ExecTimeout: Duration(25 * time.Hour)}}, wantErr: "limits.exec_timeout 25h is over the daemon's ceiling of 24h"},
		{name: "sandbox timeout", p: Policy{Limits: Limits{SandboxTimeout: Duration(8 * 24 * time.Hour)}}, wantErr: "limits.sandbox_timeout 192h is over the daemon's ceiling of 168h"},
		{name: "output", p: Policy{Limits: Limits{OutputBytes: 1<<30 + 1}}, wantErr: "limits.output_bytes 1073741825 is over the daemon's ceiling of 1G"},
		{name: "allow entries", p: Policy{Network: Network{Mode: ModeAllowlist, Allow: hosts(257)}}, wantErr: "network.allow: 257 entries, over the daemon's ceiling of 256"},
		{name: "secrets", p: Policy{Network: Network{Mode: ModeAllowlist, Allow: hosts(1)}, Secrets: secrets(65)}, wantErr: "secrets: 65 secrets, over the daemon's ceiling of 64"},
		{name: "env", p: Policy{Env: vars(257)}, wantErr: "env: 257 variables, over the daemon's ceiling of 256"},
		{name: "NaN cpus", p: Policy{Limits: Limits{CPUs: nan()}}, wantErr: "limits.cpus: not a number"},
		{name: "negative memory", p: Policy{Limits: Limits{Memory: -1}}, wantErr: "limits.memory: cannot be negative"},
		{name: "negative timeout", p: Policy{Limits: Limits{ExecTimeout: -1}}, wantErr: "limits.exec_timeout: cannot be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate(DefaultCeilings())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("Validate = %v; want an invalid error containing %q", err, tt.wantErr)
			}
			// Without ceilings only the sanity checks remain.
			if err := tt.p.Validate(Ceilings{}); err != nil && strings.Contains(err.Error(), "ceiling") {
				t.Errorf("Validate(no ceilings) = %v", err)
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// TestValidateLeavesThePolicyAlone checks that Validate canonicalises a
// copy: the caller's maps and slices are not rewritten.
func TestValidateLeavesThePolicyAlone(t *testing.T) {
	p := Policy{
		Network: Network{Mode: ModeAllowlist, Allow: []string{"Example.COM"}},
		Secrets: map[string]SecretBinding{"K": {Hosts: []string{"EXAMPLE.com"}, Header: "x-key"}},
	}
	want := Policy{
		Network: Network{Mode: ModeAllowlist, Allow: []string{"Example.COM"}},
		Secrets: map[string]SecretBinding{"K": {Hosts: []string{"EXAMPLE.com"}, Header: "x-key"}},
	}
	if err := p.Validate(DefaultCeilings()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("Validate changed the policy (-want +got):\n%s", diff)
	}
}

func TestAllowed(t *testing.T) {
	p, err := Parse([]byte("network: {mode: allowlist, allow: [api.github.com:443, '*.example.com', bücher.de]}"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		port int
		want bool
	}{
		{"api.github.com", 443, true},
		{"API.GitHub.com.", 443, true},
		{"api.github.com", 80, false},
		{"github.com", 443, false},
		{"a.example.com", 80, true},
		{"a.b.example.com", 443, true},
		{"example.com", 443, false},
		{"evilexample.com", 443, false},
		{"example.com.evil.com", 443, false},
		{"bücher.de", 443, true},
		{"xn--bcher-kva.de", 80, true},
		{"140.82.112.5", 443, false},
		{"", 443, false},
		{"a.example.com:443", 443, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s:%d", tt.host, tt.port), func(t *testing.T) {
			if got := p.Allowed(tt.host, tt.port); got != tt.want {
				t.Errorf("Allowed(%q, %d) = %v, want %v", tt.host, tt.port, got, tt.want)
			}
		})
	}
	closed := Policy{Network: Network{Mode: ModeNone, Allow: []string{"api.github.com"}}}
	if closed.Allowed("api.github.com", 443) {
		t.Error("a policy in mode none allowed a host")
	}
}
