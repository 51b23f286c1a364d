package battery

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestFileRace runs SECURITY.md C17-C18 with a real sandbox as the
// attacker on every backend: while a process inside swaps a directory for
// symlinks to a host directory (absolute, and relative through ".."), the
// host writes thousands of files into that directory through the file
// API. Nothing may land outside the workspace. The oracle is a listing of
// the host directory and a canary in it.
func TestFileRace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		x := e.newBox(t, sandbox.Limits{})
		sentinel := t.TempDir()
		canary := "canary-" + randHex(8)
		if err := os.WriteFile(filepath.Join(sentinel, "canary"), []byte(canary), 0o644); err != nil {
			t.Fatal(err)
		}
		before := listDir(t, sentinel)
		rel, err := filepath.Rel(x.files(), sentinel)
		if err != nil || !strings.HasPrefix(rel, "..") {
			t.Fatalf("no relative way from the workspace to the sentinel: %q %v", rel, err)
		}

		// Control: the same link followed by a plain host write lands
		// in the sentinel, so the attack would work on a naive host.
		ctl := filepath.Join(x.files(), ".battery-control-link")
		if err := os.Symlink(sentinel, ctl); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctl, "control"), []byte("x"), 0o644); err != nil {
			t.Fatalf("control: %v", err)
		}
		os.Remove(filepath.Join(sentinel, "control"))
		os.Remove(ctl)

		// The attacker: swap race/ for a link and back, as fast as it can.
		script := fmt.Sprintf(`cd /workspace; end=$(($(date +%%s)+8)); while [ $(date +%%s) -lt $end ]; do
  rm -rf race; mkdir race; rm -rf race; ln -s %q race; rm -f race; mkdir race; rm -rf race; ln -s %q race; rm -f race
done; echo done`, sentinel, rel)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done := make(chan string, 1)
		go func() {
			var out syncBuffer
			e.m.Exec(ctx, x.ws.ID, guest.ExecRequest{Argv: []string{"sh", "-c", script}, Env: defaultEnv, Timeout: 30 * time.Second}, nil, &out, io.Discard)
			done <- out.String()
		}()
		// The host, meanwhile: writes and directory creations into race/.
		writes, refused := 0, 0
		deadline := time.Now().Add(6 * time.Second)
		for i := 0; time.Now().Before(deadline) && i < 2000; i++ {
			f, release, err := e.m.Files(ctx, x.ws.ID, true)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("race/f%d", i)
			if i%3 == 0 {
				_, err = f.Mkdir(ctx, name, true)
			} else {
				_, err = f.Write(ctx, name, strings.NewReader("host data"), 0o644, i%2 == 0)
			}
			release()
			writes++
			if err != nil {
				refused++
			}
		}
		if out := <-done; !strings.Contains(out, "done") {
			t.Errorf("the attacker did not run to its end: %q", out)
		}
		t.Logf("%s: %d host writes during the swaps, %d refused", e.name, writes, refused)
		if after := listDir(t, sentinel); !slices.Equal(before, after) {
			t.Errorf("the host directory changed during the race: %q, was %q", after, before)
		}
		if b, _ := os.ReadFile(filepath.Join(sentinel, "canary")); string(b) != canary {
			t.Errorf("the canary changed: %q", b)
		}
		if writes == refused {
			t.Errorf("every host write was refused: the race never left race/ as a directory, so it proved nothing")
		}
	})
}

// listDir lists a directory tree, relative names with their sizes.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fmt.Sprintf("%s %d", rel, fi.Size()))
		return nil
	})
	return out
}
