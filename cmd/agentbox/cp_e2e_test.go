package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCpTrailingSlash: a remote PATH that ends in a slash names a
// directory to copy into or from. A real directory takes the copy; a
// symlink (planted by the sandbox, pointing out of the workspace, into it,
// or at a host directory), a file and a missing path are refused with the
// path and the reason, and nothing is replaced, followed or written, in
// either direction, for WS:PATH and SANDBOX:PATH, through the file API
// (under /workspace) and through tar (elsewhere).
func TestCpTrailingSlash(t *testing.T) {
	data, ws := sandboxWorkspace(t)
	sb := sandboxOf(t, data, ws)
	host := t.TempDir()
	hostFile := filepath.Join(host, "hostfile")
	if err := os.WriteFile(hostFile, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(host, "plain") // through the file API
	writeTree(t, plain, false)
	linked := filepath.Join(host, "linked") // through tar: it holds a symlink
	writeTree(t, linked, true)
	// A host directory that a planted link names: nothing may land there.
	lure := t.TempDir()

	sandboxSh := func(script string) string {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", "exec", "-n", ws, "--env", "PATH=/bin", "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("%s: exit %d %s", script, code, errOut)
		}
		return out
	}
	sandboxSh(`set -e
for d in /workspace /tmp; do
	mkdir -p $d/realdir
	ln -s /etc $d/linkout
	ln -s realdir $d/linkin
	ln -s '` + lure + `' $d/hostlink
	echo unchanged > $d/afile
done`)
	state := func() string {
		t.Helper()
		return sandboxSh(`find /workspace /tmp /etc -path /workspace/.git -prune -o -print | sort
for d in /workspace /tmp; do readlink $d/linkout $d/linkin $d/hostlink; cat $d/afile; done`)
	}
	cp := func(args ...string) {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"--json", "cp"}, args...)...)
		if code != 0 {
			t.Fatalf("cp %v: exit %d %s %s", args, code, out, errOut)
		}
	}

	t.Run("into a directory", func(t *testing.T) {
		cp(hostFile, ws+":realdir/")
		cp(hostFile, sb+":/tmp/realdir/")
		cp(plain, sb+":realdir/")
		cp(linked, ws+":/workspace/realdir/")
		cp(hostFile, ws+":/workspace/") // the workspace root
		got := sandboxSh("cat /workspace/realdir/hostfile /tmp/realdir/hostfile /workspace/hostfile; cat /workspace/realdir/plain/a.txt; readlink /workspace/realdir/linked/sub/link")
		if want := "from the host\nfrom the host\nfrom the host\nalpha\n../a.txt\n"; got != want {
			t.Errorf("copied into real directories: %q, want %q", got, want)
		}
	})

	t.Run("from a directory", func(t *testing.T) {
		for _, src := range []string{ws + ":realdir/", sb + ":/workspace/realdir/", ws + ":/tmp/realdir/"} {
			dst := t.TempDir()
			cp(src, dst)
			if b, err := os.ReadFile(filepath.Join(dst, "realdir", "hostfile")); err != nil || string(b) != "from the host\n" {
				t.Errorf("cp %s %s: %v %q", src, dst, err, b)
			}
		}
	})

	refused := []struct {
		path, reason string
	}{
		{"linkout/", "/workspace/linkout is a symlink, not a directory"},
		{"linkin/", "/workspace/linkin is a symlink, not a directory"},
		{"/workspace/hostlink/", "/workspace/hostlink is a symlink, not a directory"},
		{"afile/", "/workspace/afile is a file, not a directory"},
		{"missing/", "the directory /workspace/missing does not exist"},
		{"/tmp/linkout/", "/tmp/linkout is a symlink, not a directory"},
		{"/tmp/hostlink/", "/tmp/hostlink is a symlink, not a directory"},
		{"/tmp/afile/", "/tmp/afile is a file, not a directory"},
		{"/tmp/missing/", "the directory /tmp/missing does not exist"},
	}
	before := state()
	refuse := func(t *testing.T, args []string, reason string) {
		t.Helper()
		out, errOut, code := runCLI(t, data, "", append([]string{"cp"}, args...)...)
		if code == 0 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, reason) {
			t.Errorf("cp %v: exit %d %q %q, want a refusal saying %q", args, code, out, errOut, reason)
		}
	}

	t.Run("refused into", func(t *testing.T) {
		for _, tc := range refused {
			for _, target := range []string{ws, sb} {
				for _, src := range []string{hostFile, plain, linked} {
					refuse(t, []string{src, target + ":" + tc.path}, tc.reason)
				}
			}
		}
		if after := state(); after != before {
			t.Errorf("a refused copy changed the sandbox:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("refused from", func(t *testing.T) {
		for _, tc := range refused {
			for _, target := range []string{ws, sb} {
				parent := t.TempDir()
				refuse(t, []string{target + ":" + tc.path, filepath.Join(parent, "dst")}, tc.reason)
				refuse(t, []string{target + ":" + tc.path, parent}, tc.reason)
				if entries, _ := os.ReadDir(parent); len(entries) != 0 {
					t.Errorf("cp %s:%s wrote %v", target, tc.path, entries)
				}
			}
		}
	})

	if entries, _ := os.ReadDir(lure); len(entries) != 0 {
		t.Errorf("the host directory a planted link names holds %v", entries)
	}

	t.Run("host side", func(t *testing.T) {
		// A local destination with a slash must be a directory too.
		refuse(t, []string{ws + ":afile", hostFile + "/"}, "is not a directory")
		refuse(t, []string{ws + ":afile", filepath.Join(host, "nothere") + "/"}, "does not exist")
		if b, _ := os.ReadFile(hostFile); string(b) != "from the host\n" {
			t.Errorf("the host file became %q", b)
		}
	})
}

// sandboxOf is the ID of the running sandbox of workspace ws.
func sandboxOf(t *testing.T, data, ws string) string {
	t.Helper()
	out, errOut, code := runCLI(t, data, "", "--json", "sandbox", "ls")
	if code != 0 {
		t.Fatalf("sandbox ls: %s %s", out, errOut)
	}
	list, _ := oneJSON(t, out)["sandboxes"].([]any)
	for _, v := range list {
		if sb, _ := v.(map[string]any); sb["workspace_id"] == ws && sb["state"] == "running" {
			return sb["id"].(string)
		}
	}
	t.Fatalf("no running sandbox of %s in %s", ws, out)
	return ""
}
