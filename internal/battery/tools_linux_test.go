package battery

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/backend/local"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
)

// toolImage is the Debian image with the language tools (issue 11), built by
// scripts/test.sh through `agentbox image build --kind debian --packages ...` and, when
// it is missing, by the battery through the same code (image.Build).
const toolImage = image.ToolsName

// toolCase is one ordinary developer task: a bash script whose exit status and output
// must be the same in a sandbox and under plain docker run of the same image.
type toolCase struct {
	name, script string
}

// toolCases run in this order; git, which changes the workspace, is last, and the others
// write only under /tmp or in directories of their own.
var toolCases = []toolCase{
	{"ls", `ls -la / >/dev/null && ls -la /etc/passwd /usr/bin/env | awk '{print $1, $3, $4, $NF}'`},
	{"stat", `stat -c '%a %U %G %F %n' /etc/passwd /usr/bin /workspace/README.md`},
	{"find", `cd /workspace && find . -path ./.git -prune -o -type f -print | sort`},
	{"du", `du -sb /usr/share/common-licenses /workspace/README.md`},
	{"pytest", `rm -rf /workspace/nxtests && cp -r /usr/lib/python3/dist-packages/networkx/algorithms/shortest_paths/tests /workspace/nxtests && cd /workspace &&
python3 -m pytest -q -p no:cacheprovider nxtests 2>&1 | tail -n 1 | sed 's/ in [0-9.]*s.*//'; rm -rf /workspace/nxtests`},
	{"go", `rm -rf /workspace/gomod && mkdir -p /workspace/gomod && cd /workspace/gomod &&
cat > go.mod <<'EOF'
module example.com/hello

go 1.19
EOF
cat > hello.go <<'EOF'
package main

// static int twice(int x) { return 2 * x; }
import "C"

import "fmt"

func Twice(x int) int { return int(C.twice(C.int(x))) }

func main() { fmt.Println("twice 21 is", Twice(21)) }
EOF
cat > hello_test.go <<'EOF'
package main

import "testing"

func TestTwice(t *testing.T) {
	if Twice(4) != 8 {
		t.Fatal("twice 4")
	}
}
EOF
go env CGO_ENABLED && go test -count=1 ./... | sed 's/\t[0-9.]*s$//' && go build -o /tmp/hello . && /tmp/hello; s=$?; cd / && rm -rf /workspace/gomod; exit $s`},
	{"node-npm", `rm -rf /tmp/np && mkdir /tmp/np && cd /tmp/np &&
cat > package.json <<'EOF'
{"name": "probe", "version": "1.0.0", "private": true, "scripts": {"test": "node test.js", "greet": "node -e \"console.log('hello from npm')\""}}
EOF
echo 'const assert = require("assert"); assert.strictEqual([1, 2, 3].map(x => x * 2).join(), "2,4,6"); console.log("node test ok");' > test.js &&
npm test --silent --no-update-notifier && npm run greet --silent --no-update-notifier && node -e 'console.log(typeof require("fs").statSync)'`},
	{"make-gcc", `rm -rf /tmp/mk && mkdir /tmp/mk && cd /tmp/mk &&
printf '#include <stdio.h>\nint main(void) { printf("hello from gcc\\n"); return 0; }\n' > hello.c &&
printf 'hello: hello.c\n\tgcc -O2 -o $@ $<\n' > Makefile && make -s && ./hello`},
	{"sigstop", `sleep 3 & p=$!; kill -STOP $p; sleep 0.3; a=$(cut -d' ' -f3 /proc/$p/stat); kill -CONT $p; sleep 0.3; b=$(cut -d' ' -f3 /proc/$p/stat); kill $p; wait $p; echo "$a $b $?"`},
	{"job-control", `set -m; sleep 5 & sleep 0.1; kill -STOP %1; sleep 0.3; jobs | sed 's/  */ /g'; kill -CONT %1; kill %1; wait; echo done`},
	{"ps-top", `ps -o user=,comm= -p $$ && ps -e >/dev/null && top -b -n1 | head -n 1 | cut -c1-3`},
	{"tar-unzip", `cd /workspace && tar -czf /tmp/ws.tgz README.md src && tar -tzf /tmp/ws.tgz | sort &&
zip -q -r /tmp/ws.zip README.md src && rm -rf /tmp/u && mkdir /tmp/u && cd /tmp/u && unzip -q /tmp/ws.zip && find . -type f | sort && cat README.md`},
	{"git", `cd /workspace && git status --porcelain && git log --format=%s && echo change > change.txt && git add change.txt &&
git commit -qm "a change" && git log --format=%s -n 1 && git status --porcelain | wc -l`},
}

// ensureToolImage builds the tool image when the engine lacks it (or it is stale),
// through the code `agentbox image build --kind debian --packages` runs.
func ensureToolImage(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	if _, err := image.Build(ctx, image.ToolsOptions(filepath.Join(image.DefaultCache, "..", "debootstrap"), nil)); err != nil {
		backendtest.SkipOrFail(t, "building "+toolImage+": "+err.Error())
	}
}

// TestTools runs ordinary developer tools (issue 11) in a sandbox of every backend, in the
// tool image, with no environment given, and compares each result with the same script
// under plain `docker run` of the same image (runc, the sandbox user, no network, a copy
// of the workspace).
func TestTools(t *testing.T) {
	requireSetup(t)
	ensureToolImage(t)
	forEachBackend(t, func(t *testing.T, e *env) {
		w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "tools"})
		if err != nil {
			t.Fatal(err)
		}
		// The baseline's workspace: a copy as the sandbox will first see it.
		pristine := filepath.Join(t.TempDir(), "ws")
		if out, err := exec.Command("cp", "-a", e.m.FilesPath(w), pristine).CombinedOutput(); err != nil {
			t.Fatalf("copying the workspace: %v %s", err, out)
		}
		if _, err := e.m.CreateSandbox(t.Context(), w.ID, sandbox.Spec{Image: toolImage, Limits: sandbox.Limits{MemoryBytes: 2 << 30, CPUs: 2, Pids: 1024}}); err != nil {
			t.Fatalf("CreateSandbox %s on %s: %v", toolImage, e.name, err)
		}
		for _, tc := range toolCases {
			t.Run(tc.name, func(t *testing.T) {
				wantCode, want := dockerRun(t, pristine, tc.script)
				var out, errOut syncBuffer
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
				defer cancel()
				start := time.Now()
				// No Env: the command gets its image's environment, PATH and HOME.
				res, err := e.m.Exec(ctx, w.ID, guest.ExecRequest{Argv: []string{"bash", "-c", tc.script}, Timeout: 4 * time.Minute}, nil, &out, &errOut)
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
				t.Logf("%s: %s in %s", e.name, tc.name, time.Since(start).Round(time.Millisecond))
				got := out.String()
				if e.name == local.Name {
					// The local jail's user namespace maps only the sandbox
					// user (bubblewrap runs as that user, not root): the
					// image's root-owned files show as the overflow ids,
					// nobody and nogroup. Documented; the owner is all
					// that differs.
					got = strings.ReplaceAll(got, "nobody nogroup", "root root")
				}
				if res.ExitCode != wantCode || got != want {
					t.Errorf("%s in a %s sandbox: exit %d, stdout\n%s\nstderr\n%s\nwant (docker run) exit %d, stdout\n%s",
						tc.name, e.name, res.ExitCode, out.String(), tail(errOut.String(), 2000), wantCode, want)
				}
			})
		}
	})
}

// dockerRun runs script under plain docker run of the tool image over a fresh copy of
// the workspace at pristine, and returns its exit status and stdout.
func dockerRun(t *testing.T, pristine, script string) (int, string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if out, err := exec.Command("cp", "-a", pristine, ws).CombinedOutput(); err != nil {
		t.Fatalf("copying the workspace: %v %s", err, out)
	}
	defer os.RemoveAll(ws)
	var stdout, stderr syncBuffer
	cmd := exec.CommandContext(t.Context(), "docker", "run", "--rm", "--network", "none", "--user", "1000:1000",
		"-v", ws+":/workspace", "-w", "/workspace", toolImage, "bash", "-c", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("docker run: %v", err)
	}
	if strings.TrimSpace(stdout.String()) == "" {
		t.Fatalf("docker run printed nothing (exit %d): %s", code, tail(stderr.String(), 2000))
	}
	return code, stdout.String()
}

// TestImageEnv runs an image that puts its tools on PATH through ENV (as language images
// do), built from a Dockerfile, on every backend: a command with no environment of its
// own finds the tool, gets the image's variables, a writable HOME, the policy's variables
// over the image's and the request's over both, and nothing of the daemon's.
func TestImageEnv(t *testing.T) {
	requireSetup(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(`FROM `+testImage+`
ENV PATH=/opt/tools/bin:/usr/bin:/bin GREETING=hello LANG=C.UTF-8
RUN mkdir -p /opt/tools/bin && printf '#!/bin/sh\necho tool $GREETING\n' > /opt/tools/bin/mytool && chmod 755 /opt/tools/bin/mytool
`), 0o644)
	name := "agentbox-test/envimage:" + randHex(4)
	img, err := image.BuildDockerfile(t.Context(), image.DockerfileOptions{Dockerfile: filepath.Join(dir, "Dockerfile"), Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("docker", "rmi", "-f", name).Run()
		// The local backend's unpacked copy in the machine-wide cache.
		if u, ok := image.CachedID(image.DefaultCache, img.ID); ok {
			os.RemoveAll(filepath.Dir(u.Rootfs))
		}
	})
	const script = `mytool; echo "PATH=$PATH"; echo "HOME=$HOME"; echo "LANG=$LANG"; echo "TASK=$TASK"; touch "$HOME/.probe" && echo home writable; env | grep -c AWS_SECRET_ACCESS_KEY`
	want := "tool hello\nPATH=/opt/tools/bin:/usr/bin:/bin\nHOME=" + sandbox.DefaultHome + "\nLANG=en\nTASK=request\nhome writable\n0\n"
	forEachBackend(t, func(t *testing.T, e *env) {
		w, err := e.m.CreateWorkspace(t.Context(), manager.CreateRequest{Repo: e.repo.ID, Task: "env"})
		if err != nil {
			t.Fatal(err)
		}
		spec := sandbox.Spec{Image: name, Policy: &policy.Policy{Network: policy.Network{Mode: policy.ModeNone}, Env: map[string]string{"LANG": "en", "TASK": "policy"}}}
		if _, err := e.m.CreateSandbox(t.Context(), w.ID, spec); err != nil {
			t.Fatalf("CreateSandbox %s on %s: %v", name, e.name, err)
		}
		var out, errOut syncBuffer
		res, err := e.m.Exec(t.Context(), w.ID, guest.ExecRequest{Argv: []string{"sh", "-c", script}, Env: []string{"TASK=request"}, Timeout: time.Minute}, nil, &out, &errOut)
		if err != nil || res.ExitCode != 1 && res.ExitCode != 0 || out.String() != want {
			t.Errorf("%s: %v %+v stdout\n%s\nstderr %s\nwant\n%s", e.name, err, res, out.String(), errOut.String(), want)
		}
	})
}
