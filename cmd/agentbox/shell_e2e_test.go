package main

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/image"
	"github.com/agentbox/agentbox/internal/testutil"
	"github.com/agentbox/agentbox/internal/testutil/skip"
)

// sandboxWorkspace starts a daemon with one workspace and a busybox
// sandbox on docker, and returns the data dir and the workspace ID.
func sandboxWorkspace(t *testing.T) (string, string) {
	t.Helper()
	if err := exec.Command("docker", "info").Run(); err != nil {
		skip.OrFail(t, fmt.Sprintf("no docker engine: %v", err))
	}
	if _, err := image.Build(t.Context(), image.BuildOptions{Kind: image.KindBusybox}); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	src := testutil.NewRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
	d := startDaemon(t, data)
	cleanupAll(t, data)
	// Cleanups run last first: this daemon stops before cleanupAll
	// starts its own.
	t.Cleanup(func() { d.stop(t) })
	out, errOut, code := runCLI(t, data, "", "--json", "ws", "create", "--repo", src.Dir)
	if code != 0 {
		t.Fatalf("ws create: %s %s", out, errOut)
	}
	ws := oneJSON(t, out)["id"].(string)
	out, errOut, code = runCLI(t, data, "", "--json", "sandbox", "create", "--ws", ws, "--backend", "docker", "--image", "agentbox/busybox:latest")
	if code != 0 {
		t.Fatalf("sandbox create: %s %s", out, errOut)
	}
	return data, ws
}

func TestShellAndExecStdinThroughTheCLI(t *testing.T) {
	data, ws := sandboxWorkspace(t)
	env := "--env=PATH=/bin:/usr/bin"

	out, errOut, code := runCLI(t, data, "hi\n", "exec", ws, "--", "cat")
	if code != 0 || out != "hi\n" || errOut != "" {
		t.Errorf("echo hi | agentbox exec -- cat: exit %d %q %q", code, out, errOut)
	}
	big := strings.Repeat("0123456789abcdef", 1<<18) // 4 MiB
	out, _, code = runCLI(t, data, big, "exec", ws, env, "--", "sha256sum")
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte(big))); code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("4 MiB through exec: exit %d %q, want %s", code, out, want)
	}
	out, _, code = runCLI(t, data, "ignored\n", "exec", "-n", ws, "--", "cat")
	if code != 0 || out != "" {
		t.Errorf("exec -n: exit %d %q", code, out)
	}

	// Without a terminal, shell runs the shell on the pipe (as ssh does).
	out, errOut, code = runCLI(t, data, "echo from-shell $((40+2)); cat hello.txt; exit 3\n", "shell", ws, env)
	if code != 3 || out != "from-shell 42\nhello from the repo\n" {
		t.Errorf("shell on a pipe: exit %d %q %q", code, out, errOut)
	}
	// -t asks for a terminal anyway: the PTY path over the WebSocket. The
	// end of the pipe is typed as ^D, which ends the shell.
	out, errOut, code = runCLI(t, data, "tty; stty size; echo pty-$((1+1))\n", "shell", "-t", ws, env)
	if code != 0 || !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "24 80") || !strings.Contains(out, "pty-2") {
		t.Errorf("shell -t: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, data, "exit 5\n", "shell", "-t", ws, env)
	if code != 5 {
		t.Errorf("shell -t exit 5: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, data, "", "shell", "-t", ws, env, "--", "sh", "-c", "kill -9 $$")
	if code != 137 {
		t.Errorf("shell killed by SIGKILL: exit %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, data, "", "shell", "-t", "ws_aaaaaaaaaaaa")
	if code != 1 || out != "" || errOut != "agentbox: workspace ws_aaaaaaaaaaaa not found\n" {
		t.Errorf("shell in an unknown workspace: exit %d %q %q", code, out, errOut)
	}
}

// treeOf lists a local tree as "path kind content" lines.
func treeOf(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+" -> "+target)
		case d.IsDir():
			out = append(out, rel+"/")
		default:
			b, _ := os.ReadFile(p)
			info, _ := d.Info()
			out = append(out, fmt.Sprintf("%s %o %q", rel, info.Mode().Perm(), b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func writeTree(t *testing.T, root string, links bool) {
	t.Helper()
	for name, content := range map[string]string{"a.txt": "alpha\n", "sub/b.bin": "\x00\xff binary", "sub/deeper/c.sh": "#!/bin/sh\necho c\n"} {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "sub/deeper/c.sh"), 0o755)
	if links {
		if err := os.Symlink("../a.txt", filepath.Join(root, "sub/link")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCpThroughTheCLI(t *testing.T) {
	data, ws := sandboxWorkspace(t)
	host := t.TempDir()
	src := filepath.Join(host, "src")
	writeTree(t, src, true)
	plain := filepath.Join(host, "plain")
	writeTree(t, plain, false)
	want := treeOf(t, src)
	cp := func(args ...string) {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json", "cp"}, args...)...)
		if code != 0 {
			t.Fatalf("cp %v: exit %d %s %s", args, code, out, errOut)
		}
		if doc := oneJSON(t, out); doc["id"] != ws {
			t.Errorf("cp %v: id = %v", args, doc["id"])
		}
	}
	sandboxSh := func(script string) string {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", "exec", "-n", ws, "--env", "PATH=/bin", "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("%s: exit %d %s", script, code, errOut)
		}
		return out
	}

	t.Run("outside the workspace through tar", func(t *testing.T) {
		cp(src, ws+":/tmp/up") // a new name
		cp(src, ws+":/tmp")    // into an existing directory
		if got := sandboxSh("cd /tmp && find up src | sort; readlink up/sub/link; cat up/sub/b.bin | od -An -c | head -1; ls -l up/sub/deeper/c.sh"); !strings.Contains(got, "up/sub/deeper/c.sh\n") ||
			!strings.Contains(got, "src/sub/link\n") || !strings.Contains(got, "../a.txt\n") || !strings.Contains(got, "-rwxr-xr-x") {
			t.Errorf("in the sandbox:\n%s", got)
		}
		out := filepath.Join(host, "down1")
		cp(ws+":/tmp/up", out)
		if got := treeOf(t, out); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("round trip through /tmp:\n got %q\nwant %q", got, want)
		}
		// A single file, into an existing directory.
		cp(ws+":/tmp/up/a.txt", host)
		if b, _ := os.ReadFile(filepath.Join(host, "a.txt")); string(b) != "alpha\n" {
			t.Errorf("single file = %q", b)
		}
	})

	t.Run("inside the workspace through the file API", func(t *testing.T) {
		cp(plain, ws+":copied") // relative: under /workspace
		cp(filepath.Join(plain, "a.txt"), ws+":/workspace/renamed.txt")
		out, _, _ := runCLI(t, data, "", "files", "read", ws, "copied/sub/b.bin")
		if out != "\x00\xff binary" {
			t.Errorf("uploaded file = %q", out)
		}
		if got := sandboxSh("cat /workspace/renamed.txt; ls -l /workspace/copied/sub/deeper/c.sh"); !strings.HasPrefix(got, "alpha\n-rwxr-xr-x") {
			t.Errorf("in the sandbox: %q", got)
		}
		down := filepath.Join(host, "down2")
		cp(ws+":copied", down)
		if got, want := treeOf(t, down), treeOf(t, plain); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("round trip through the file API:\n got %q\nwant %q", got, want)
		}
		// A tree with a symlink cannot go through the file API: it goes
		// through tar, and comes back through the file API.
		cp(src, ws+":withlink")
		down3 := filepath.Join(host, "down3")
		cp(ws+":/workspace/withlink", down3)
		if got := treeOf(t, down3); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("symlink tree through the workspace:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("hostile content from the sandbox", func(t *testing.T) {
		for _, tc := range []struct{ name, script, errHas string }{
			{"absolute symlink", "mkdir -p /tmp/evil1 && echo ok > /tmp/evil1/ok && ln -s /etc /tmp/evil1/etc", "points outside"},
			{"escaping symlink", "mkdir -p /tmp/evil2/d && ln -s ../../../../.. /tmp/evil2/d/up", "points outside"},
			{"workspace symlink out", "mkdir -p /workspace/evil3 && ln -s /etc/passwd /workspace/evil3/pw", "points outside"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				sandboxSh(tc.script)
				parent := t.TempDir()
				dst := filepath.Join(parent, "dst")
				srcPath := "/tmp/" + strings.Fields(tc.script)[2][5:]
				if strings.Contains(tc.script, "/workspace/") {
					srcPath = "/workspace/evil3"
				}
				out, errOut, code := runCLI(t, data, "", "cp", ws+":"+srcPath, dst)
				if code == 0 || !strings.Contains(errOut, tc.errHas) || strings.Count(errOut, "\n") != 1 {
					t.Errorf("cp of %s: exit %d %q %q", srcPath, code, out, errOut)
				}
				// Nothing but the destination appeared, and no link in it
				// leads out.
				entries, _ := os.ReadDir(parent)
				if len(entries) > 1 || (len(entries) == 1 && entries[0].Name() != "dst") {
					t.Errorf("entries next to the destination: %v", entries)
				}
				for _, line := range treeOf(t, parent) {
					if strings.Contains(line, " -> ") {
						t.Errorf("a refused link was written: %s", line)
					}
				}
			})
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		for _, args := range [][]string{
			{"a", "b"},
			{ws + ":/tmp/x", ws + ":/tmp/y"},
			{ws + ":/tmp/does-not-exist", filepath.Join(host, "nope")},
			{src, ws + ":/tmp/no/such/dir/x"},
			{filepath.Join(host, "missing"), ws + ":/tmp/x"},
		} {
			out, errOut, code := runCLI(t, data, "", append([]string{"cp"}, args...)...)
			if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "agentbox: ") {
				t.Errorf("cp %v: exit %d %q %q", args, code, out, errOut)
			}
		}
	})
}
