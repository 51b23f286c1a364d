package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/sandbox/backendtest"
	"github.com/agentbox/agentbox/internal/testutil"
)

// debianImage is the image for real work, which scripts/test.sh builds.
const debianImage = "agentbox/debian:bookworm"

// TestGitInsideTheSandbox: with the Debian image, the workspace is a
// normal checkout inside the sandbox on every backend. git works there
// (status, diff, add, commit, log, checkout -b) without any host path,
// and files written by the host's file API and by the sandbox user are
// readable and writable by both.
func TestGitInsideTheSandbox(t *testing.T) {
	// The local backend reads the image's root from the data dir that
	// `agentbox image build` filled (the default one, as scripts/test.sh
	// runs it); each test daemon gets a link to it.
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(cfg.DataDir, "images", "debian")
	if _, err := os.Stat(filepath.Join(rootfs, "rootfs", "usr", "bin", "git")); err != nil {
		backendtest.SkipOrFail(t, "the Debian image's root is not in "+rootfs+": run agentbox image build --kind debian")
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{index .Config.Labels \""+image.LabelKind+"\"}}", debianImage).Output(); err != nil || strings.TrimSpace(string(out)) != "debian" {
		backendtest.SkipOrFail(t, debianImage+" is not in the engine: run agentbox image build --kind debian")
	}
	for _, backend := range []string{"docker", "gvisor", "local"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testGitInside(t, backend, rootfs)
		})
	}
}

func testGitInside(t *testing.T, backend, rootfs string) {
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rootfs, filepath.Join(data, "images", "debian")); err != nil {
		t.Fatal(err)
	}
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello\n", "lib/util.py": "X = 1\n"})
	d := startDaemon(t, data)
	defer d.stop(t)
	cleanupAll(t, data)
	cli := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, code := runCLI(t, data, stdin, args...)
		if code != 0 {
			t.Fatalf("agentbox %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	ws := oneJSON(t, cli("", "--json", "ws", "create", "--repo", src.Dir, "--branch", "task-1"))["id"].(string)
	cli("", "--json", "sandbox", "create", "--ws", ws, "--backend", backend, "--image", debianImage)
	// The host writes first, through the file API.
	cli("", "files", "mkdir", ws, "notes")
	cli("from the host\n", "files", "write", ws, "notes/host.txt")

	script := `set -e
git status --porcelain
git diff --stat
# No host path anywhere in the metadata: no alternates, no worktree link.
test "$(git rev-parse --git-dir)" = .git
test ! -e .git/objects/info/alternates
git fsck --connectivity-only --no-progress 2>&1
git checkout -q -b feature
echo bye >> hello.txt
echo "from the sandbox" >> notes/host.txt
mkdir -p made
echo "made inside" > made/inside.txt
git add -A
git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "work from the sandbox"
git log --format=%s -2
echo "branch=$(git rev-parse --abbrev-ref HEAD)"
echo "left=$(git status --porcelain | wc -l)"
`
	out := cli("", "exec", ws, "--env", "PATH=/usr/bin:/bin", "--env", "HOME=/tmp", "--", "bash", "-c", script)
	for _, want := range []string{"?? notes/", "work from the sandbox\ninitial\n", "branch=feature\n", "left=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: git inside the sandbox printed no %q:\n%s", backend, want, out)
		}
	}

	// Both ways: the host reads and rewrites what the sandbox user made,
	// and the sandbox user appends to what the host wrote.
	if got := cli("", "files", "read", ws, "made/inside.txt"); got != "made inside\n" {
		t.Errorf("host read of a file the sandbox made: %q", got)
	}
	cli("rewritten by the host\n", "files", "write", ws, "made/inside.txt")
	cli("", "files", "mkdir", ws, "made/host-dir")
	out = cli("", "exec", ws, "--", "sh", "-c", `set -e; echo more >> made/inside.txt; echo x > made/host-dir/y; cat made/inside.txt notes/host.txt`)
	if want := "rewritten by the host\nmore\nfrom the host\nfrom the sandbox\n"; out != want {
		t.Errorf("%s: the sandbox's view after host writes: %q, want %q", backend, out, want)
	}
	// The host-side diff sees the sandbox's commit and what came after it.
	diff := cli("", "ws", "diff", ws)
	for _, want := range []string{"+bye", "+more", "made/host-dir/y"} {
		if !strings.Contains(diff, want) {
			t.Errorf("%s: ws diff lacks %q:\n%s", backend, want, diff)
		}
	}
}
