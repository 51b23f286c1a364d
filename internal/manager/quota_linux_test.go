package manager

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/workspace"
)

func TestDiskQuota(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	h.configure = func(c *Config) { c.DiskQuota = 32 << 20 }
	h.reopen()
	ctx := t.Context()

	w := h.create(CreateRequest{})
	if w.DiskQuota != 32<<20 || !workspace.HasVolume(w.Dir) {
		t.Fatalf("a workspace under a default quota: DiskQuota %d, volume %v", w.DiskQuota, workspace.HasVolume(w.Dir))
	}
	if s := h.status(w.ID); s.Disk == nil || s.Disk.Quota != 32<<20 || s.Disk.Free <= 0 {
		t.Errorf("Status.Disk = %+v", s.Disk)
	}
	own := h.create(CreateRequest{Disk: 8 << 20})
	if own.DiskQuota != 8<<20 {
		t.Errorf("asked for 8M, got %d", own.DiskQuota)
	}

	t.Run("bad quotas change nothing", func(t *testing.T) {
		before := h.snapshot()
		for _, tt := range []struct {
			disk policy.ByteSize
			want string
		}{
			{4096, "under the minimum"},
			{21 << 30, "over the daemon's ceiling"},
			{-1, "negative"},
		} {
			_, err := h.m.CreateWorkspace(ctx, CreateRequest{Repo: h.repo.ID, Disk: tt.disk})
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "disk") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CreateWorkspace(disk %d) = %v, want ErrInvalid naming disk and %q", tt.disk, err, tt.want)
			}
			if _, err := h.m.ForkWorkspace(ctx, w.ID, ForkRequest{Disk: tt.disk}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("ForkWorkspace(disk %d) = %v, want ErrInvalid", tt.disk, err)
			}
		}
		if after := h.snapshot(); after != before {
			t.Errorf("refused requests changed state: %+v -> %+v", before, after)
		}
	})

	t.Run("forks", func(t *testing.T) {
		h := h.sub(t)
		if f := h.fork(w.ID, ForkRequest{}); f.DiskQuota != w.DiskQuota {
			t.Errorf("a fork's quota %d, its parent's %d", f.DiskQuota, w.DiskQuota)
		}
		if f := h.fork(own.ID, ForkRequest{Disk: 16 << 20}); f.DiskQuota != 16<<20 {
			t.Errorf("a fork asked for 16M has %d", f.DiskQuota)
		}
		// The parent's own changes must fit in the fork's quota.
		fs, release, err := h.m.Files(ctx, w.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fs.Write(ctx, "big.bin", bytes.NewReader(make([]byte, 12<<20)), 0o644, false)
		release()
		if err != nil {
			t.Fatal(err)
		}
		before := h.snapshot()
		_, err = h.m.ForkWorkspace(ctx, w.ID, ForkRequest{Disk: 4 << 20})
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "do not fit") {
			t.Errorf("forking 12 MiB of changes into a 4 MiB quota: %v, want ErrInvalid", err)
		}
		if after := h.snapshot(); after != before {
			t.Errorf("a failed fork left state: %+v -> %+v", before, after)
		}
	})

	t.Run("file API at the quota", func(t *testing.T) {
		fs, release, err := h.m.Files(ctx, own.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		_, err = fs.Write(ctx, "huge.bin", bytes.NewReader(make([]byte, 16<<20)), 0o644, false)
		if err == nil || !strings.Contains(err.Error(), "huge.bin") {
			t.Errorf("writing 16 MiB into an 8 MiB quota through the file API: %v", err)
		}
		var b bytes.Buffer
		if _, err := fs.Read(ctx, "README.md", &b); err != nil || b.Len() == 0 {
			t.Errorf("reading the workspace after a refused write: %v", err)
		}
		if _, err := fs.Stat(ctx, "huge.bin"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a refused write left its file: %v", err)
		}
	})
}

// A policy's limits.disk holds only on a workspace whose quota enforces
// it.
func TestDiskQuotaPolicy(t *testing.T) {
	h, _ := sandboxHarness(t)
	ctx := t.Context()
	none := h.create(CreateRequest{})
	small := h.create(CreateRequest{Disk: 16 << 20})
	big := h.create(CreateRequest{Disk: 64 << 20})
	spec := sandbox.Spec{Policy: &policy.Policy{Limits: policy.Limits{Disk: 32 << 20}}}
	for _, w := range []struct {
		id, want string
	}{{none.ID, "has no disk quota"}, {big.ID, "more than the limit"}} {
		_, err := h.m.CreateSandbox(ctx, w.id, spec)
		if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "limits.disk") || !strings.Contains(err.Error(), w.want) {
			t.Errorf("CreateSandbox(%s) with limits.disk 32M = %v, want ErrInvalid %q", w.id, err, w.want)
		}
		if sbs, _ := h.m.ListSandboxes(ctx, w.id); len(sbs) != 0 {
			t.Errorf("a refused sandbox left %d records", len(sbs))
		}
	}
	sb, err := h.m.CreateSandbox(ctx, small.ID, spec)
	if err != nil {
		t.Fatalf("CreateSandbox on a 16M workspace with limits.disk 32M: %v", err)
	}
	res, out, _ := h.exec(small.ID, "sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo rc=$?")
	if res.SandboxID != sb.ID || !strings.Contains(out, "No space left on device") {
		t.Errorf("filling a 16M workspace: %+v %q", res, out)
	}
}

// TestRecoverThaws: a daemon that died between a fork's freeze of its
// parent's disk and the thaw left the parent's writers waiting; the next
// start thaws it and says so.
func TestRecoverThaws(t *testing.T) {
	h := newHarness(t, workspace.Overlay)
	h.configure = func(c *Config) { c.DiskQuota = 16 << 20 }
	h.reopen()
	w := h.create(CreateRequest{})
	if out, err := exec.Command("fsfreeze", "--freeze", filepath.Join(w.Dir, "vol")).CombinedOutput(); err != nil {
		t.Fatalf("fsfreeze: %v: %s", err, out)
	}
	h.reopen()
	if did, err := workspace.Thaw(w.Dir); err != nil || did {
		t.Fatalf("after a restart the workspace's disk is still frozen: %v, %v", did, err)
	}
	if evs := h.events(w.ID, "workspace.thawed"); len(evs) != 1 {
		t.Errorf("workspace.thawed events: %d, want 1", len(evs))
	}
	h.writeFile(w.ID, "after.txt", "after\n")
	if got, ok := h.readFile(w.ID, "after.txt"); !ok || got != "after\n" {
		t.Errorf("after.txt = %q, %v", got, ok)
	}
	// A start with nothing frozen thaws nothing.
	h.reopen()
	if evs := h.events(w.ID, "workspace.thawed"); len(evs) != 1 {
		t.Errorf("workspace.thawed events after a clean start: %d, want 1", len(evs))
	}
}
