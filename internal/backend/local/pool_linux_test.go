package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// startPooled starts a jail for a warm pool (no workspace) and waits for
// its guest. The returned box's files is a fresh workspace, not attached.
func startPooled(t *testing.T, b *Backend, guestUID int) *box {
	t.Helper()
	req, ln := boxRequest(t, sandbox.Spec{})
	files := req.Files
	req.Files, req.WorkspaceID = "", ""
	if guestUID != 0 {
		req.GuestUID, req.GuestGID = guestUID, guestUID
	}
	info, err := b.CreateDetached(t.Context(), req, "owner-"+randHex(3))
	if err != nil {
		t.Fatalf("create detached: %v", err)
	}
	x := &box{b: b, id: req.ID, files: files, runDir: req.RunDir, ln: ln, info: info}
	t.Cleanup(func() {
		if x.conn != nil {
			x.conn.Close()
		}
		if err := b.Remove(context.Background(), x.id); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if x.conn, err = ln.Accept(ctx); err != nil {
		t.Fatalf("guest did not connect: %v\nlog:\n%s", err, b.GuestLog(x.id))
	}
	if x.rec, err = b.lookup(x.id); err != nil {
		t.Fatal(err)
	}
	return x
}

// workspaceMounts are the /workspace lines of the sandbox's own mount
// table, bottom first: mount options, then the optional fields.
func workspaceMounts(t *testing.T, x *box) [][2]string {
	t.Helper()
	var out [][2]string
	for _, l := range lines(x.mustSh(t, "cat /proc/self/mountinfo")) {
		f := strings.Fields(l)
		if len(f) < 7 || f[4] != sandbox.WorkspaceDir {
			continue
		}
		opt := f[6:slices.Index(f, "-")]
		out = append(out, [2]string{f[5], strings.Join(opt, " ")})
	}
	return out
}

// TestPooledJail: a jail started for a warm pool has an empty /workspace
// that its user cannot write; after Attach it has the workspace,
// read-write, nosuid and nodev down to its submounts, as a slave of the
// host (nothing inside propagates out); a second Attach is a conflict;
// Remove leaves no mount, in the daemon's namespace or the spawner's.
func TestPooledJail(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	for _, tc := range []struct {
		name     string
		guestUID int
	}{{"same user", 0}, {"guest user", 65533}} {
		t.Run(tc.name, func(t *testing.T) {
			x := startPooled(t, b, tc.guestUID)
			if got := x.info.Labels; got[sandbox.LabelPool] != "1" || got[sandbox.LabelPoolOwner] == "" || got[sandbox.LabelWorkspace] != "" {
				t.Errorf("labels %v, want the pool's and no workspace", got)
			}
			stage := filepath.Join(b.stageDir, x.id)
			if fi, err := os.Stat(stage); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the pooled jail's stage %s: %v %v, want mode 0700", stage, fi, err)
			}
			if ents, err := os.ReadDir(stage); err != nil || len(ents) != 1 || ents[0].Name() != "files" {
				t.Errorf("the pooled jail's stage holds %v (%v), want only its pool point", ents, err)
			}

			// Before: empty, not writable by the sandbox user.
			if got := x.mustSh(t, "id -u; ls -A /workspace"); got != "1000\n" {
				t.Errorf("before attach: %q, want uid 1000 and an empty /workspace", got)
			}
			if res, out := x.sh(t, "touch /workspace/x"); res.ExitCode == 0 {
				t.Errorf("the sandbox user wrote in the pool point: %+v %q", res, out)
			}
			before := workspaceMounts(t, x)
			if len(before) != 1 || !strings.HasPrefix(before[0][0], "ro,") || !strings.HasPrefix(before[0][1], "master:") {
				t.Fatalf("/workspace before attach: %q, want one read-only slave mount", before)
			}

			// A workspace with a file and a submount of its own that is
			// neither nosuid nor nodev.
			if err := os.WriteFile(filepath.Join(x.files, "hello.txt"), []byte("hi\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			sub := filepath.Join(x.files, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "mode=0755,size=64k,uid="+strconv.Itoa(testUID)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH) })

			if err := b.Attach(t.Context(), x.info, x.files); err != nil {
				t.Fatalf("attach: %v", err)
			}
			if err := b.Attach(t.Context(), x.info, x.files); !errors.Is(err, errdefs.ErrConflict) {
				t.Errorf("second attach = %v, want a conflict", err)
			}
			got := x.mustSh(t, "ls -A /workspace | sort; cat /workspace/hello.txt; echo made > /workspace/made.txt; echo sub > /workspace/sub/in-sub.txt")
			if got != "hello.txt\nsub\nhi\n" {
				t.Errorf("after attach the sandbox sees %q", got)
			}
			if data, err := os.ReadFile(filepath.Join(x.files, "made.txt")); err != nil || string(data) != "made\n" {
				t.Errorf("written inside, read on the host: %q %v", data, err)
			}
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(x.files, "made.txt"), &st); err != nil || st.Uid != testUID {
				t.Errorf("written inside by uid %d (%v), want %d", st.Uid, err, testUID)
			}
			after := workspaceMounts(t, x)
			if len(after) != 2 {
				t.Fatalf("/workspace after attach: %q, want the workspace over the pool point", after)
			}
			t.Logf("/workspace inside after attach: %q", after)
			top := after[1]
			opts := strings.Split(top[0], ",")
			if opts[0] != "rw" || !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
				t.Errorf("the workspace inside: %q, want rw,nosuid,nodev", top[0])
			}
			// A slave: it receives from the host, sends nothing back.
			if !strings.HasPrefix(top[1], "master:") || strings.Contains(top[1], "shared:") {
				t.Errorf("the workspace inside propagates %q, want a slave only", top[1])
			}
			subLine := x.mustSh(t, "grep ' /workspace/sub ' /proc/self/mountinfo")
			if f := strings.Fields(subLine); len(f) < 6 || !strings.Contains(f[5], "nosuid") || !strings.Contains(f[5], "nodev") || !strings.HasPrefix(f[5], "rw") {
				t.Errorf("the workspace's submount inside: %q, want rw,nosuid,nodev", subLine)
			}
			// Nothing of the stage in the sandbox's mount table.
			if mi := x.mustSh(t, "cat /proc/self/mountinfo"); strings.Contains(mi, b.stageDir) || strings.Contains(mi, x.id) {
				t.Errorf("the sandbox's mount table shows a host path:\n%s", mi)
			}

			if err := b.Remove(t.Context(), x.id); err != nil {
				t.Fatal(err)
			}
			x.conn.Close()
			x.conn = nil
			if left := leftovers(b, x.id); len(left) != 0 {
				t.Errorf("left after remove: %v", left)
			}
			if mps, err := mountsUnder(stage); err != nil || len(mps) != 0 {
				t.Errorf("mounts left under %s: %v %v", stage, mps, err)
			}
			small, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(b.sp.tid) + "/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(small), x.id) {
				t.Errorf("the spawner's namespace still holds a mount of %s:\n%s", x.id, small)
			}
			// The workspace itself is as it was: its own mounts only.
			if mps, err := mountsUnder(x.files); err != nil || !slices.Equal(mps, []string{sub}) {
				t.Errorf("mounts under the workspace after remove: %v %v, want only %s", mps, err, sub)
			}
		})
	}
}

// TestAttachRefused: Attach only takes a running pooled jail of this
// backend; a jail whose /workspace would not receive the mount, and a
// backend whose spawner fell back to the daemon's mount namespace, pool
// nothing (ErrNoAttach).
func TestAttachRefused(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	files := t.TempDir()
	cold := startBox(t, b, sandbox.Spec{})
	wantClass(t, b.Attach(t.Context(), cold.info, files), errdefs.ErrInvalid)
	wantClass(t, b.Attach(t.Context(), sandbox.Info{ID: "sb_nope", Ref: "sb_nope"}, files), errdefs.ErrNotFound)

	// The check CreateDetached makes: a jail whose /workspace is not a
	// slave of the pool point (here a cold jail's, and this process, which
	// has no /workspace) could never see an attached workspace.
	for _, pid := range []int{cold.rec.Pid, os.Getpid()} {
		if err := checkAttachable(b.stageDir, pid); !errors.Is(err, sandbox.ErrNoAttach) {
			t.Errorf("checkAttachable(the stage, pid %d) = %v, want ErrNoAttach", pid, err)
		}
	}

	fb := backendWithBwrap(t, fallbackBwrap(t))
	if fb.noAttach == nil {
		t.Fatal("a backend whose spawner fell back can pool")
	}
	req, _ := boxRequest(t, sandbox.Spec{})
	req.Files, req.WorkspaceID = "", ""
	_, err := fb.CreateDetached(t.Context(), req, "owner")
	if !errors.Is(err, sandbox.ErrNoAttach) {
		t.Errorf("CreateDetached after the fallback = %v, want ErrNoAttach", err)
	}
	if left := leftovers(fb, req.ID); len(left) != 0 {
		t.Errorf("left after a refused CreateDetached: %v", left)
	}
	if !errors.Is(fb.Attach(t.Context(), sandbox.Info{ID: req.ID, Ref: req.ID}, files), sandbox.ErrNoAttach) {
		t.Error("Attach after the fallback does not say ErrNoAttach")
	}
}
