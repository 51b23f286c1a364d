package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestCreateRefusesBadInput: bad input gets a clear ErrInvalid and
// changes nothing.
func TestCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	tests := []struct {
		name    string
		mutate  func(*sandbox.CreateRequest)
		class   error
		mention []string
	}{
		// Neither unpacked in the data dir nor in the engine (which any other
		// image is unpacked from): refused, and nothing is pulled.
		{"unknown image", func(r *sandbox.CreateRequest) { r.Spec.Image = "agentbox/nope:1" }, errdefs.ErrInvalid, []string{"agentbox/nope:1", "nothing is pulled"}},
		{"image not built", func(r *sandbox.CreateRequest) { r.Spec.Image = "debian" }, errdefs.ErrInvalid,
			[]string{filepath.Join(imagesDir, "debian", "rootfs"), "agentbox image build --kind debian"}},
		{"other tag", func(r *sandbox.CreateRequest) { r.Spec.Image = "agentbox/busybox:1.36" }, errdefs.ErrInvalid, []string{"agentbox/busybox:1.36", "nothing is pulled"}},
		{"bad id", func(r *sandbox.CreateRequest) { r.ID = "../sb_x" }, errdefs.ErrInvalid, []string{"../sb_x"}},
		{"too few pids", func(r *sandbox.CreateRequest) { r.Spec.Limits.Pids = 2 }, errdefs.ErrInvalid, []string{"pids"}},
		{"root user", func(r *sandbox.CreateRequest) { r.UID = 0 }, errdefs.ErrInvalid, []string{"root"}},
		{"relative files", func(r *sandbox.CreateRequest) { r.Files = "files" }, errdefs.ErrInvalid, []string{"workspace files"}},
		{"missing run dir", func(r *sandbox.CreateRequest) { r.RunDir = "/nonexistent/run" }, errdefs.ErrInvalid, []string{"/nonexistent/run"}},
		{"guest is a directory", func(r *sandbox.CreateRequest) { r.Guest = "/tmp" }, errdefs.ErrInvalid, []string{"guest"}},
		{"no token", func(r *sandbox.CreateRequest) { r.GuestEnv = []string{"AGENTBOX_GUEST_DEBUG=1"} }, errdefs.ErrInvalid, []string{guest.TokenEnv}},
		{"no guest env", func(r *sandbox.CreateRequest) { r.GuestEnv = nil }, errdefs.ErrInvalid, []string{guest.TokenEnv}},
		{"two tokens", func(r *sandbox.CreateRequest) { r.GuestEnv = append(r.GuestEnv, guest.TokenEnv+"=other") }, errdefs.ErrInvalid, []string{"2 " + guest.TokenEnv}},
		{"token descriptor", func(r *sandbox.CreateRequest) { r.GuestEnv = append(r.GuestEnv, guest.TokenFDEnv+"=0") }, errdefs.ErrInvalid, []string{guest.TokenFDEnv}},
		{"daemon variable", func(r *sandbox.CreateRequest) { r.GuestEnv = append(r.GuestEnv, "HOME=/root") }, errdefs.ErrInvalid, []string{"HOME"}},
		{"bad env", func(r *sandbox.CreateRequest) { r.GuestEnv = append(r.GuestEnv, "AGENTBOX_GUEST_X") }, errdefs.ErrInvalid, []string{"AGENTBOX_GUEST_X"}},
		{"other backend", func(r *sandbox.CreateRequest) { r.Spec.Backend = "docker" }, errdefs.ErrInvalid, []string{"docker"}},
		{"no workspace id", func(r *sandbox.CreateRequest) { r.WorkspaceID = "" }, errdefs.ErrInvalid, []string{"workspace id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := boxRequest(t, sandbox.Spec{})
			tt.mutate(&req)
			_, err := b.Create(t.Context(), req)
			wantClass(t, err, tt.class)
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			if validID.MatchString(req.ID) {
				if left := leftovers(b, req.ID); len(left) != 0 {
					t.Errorf("left behind: %v", left)
				}
			}
		})
	}
}

// TestCreateRollsBack injects a failure at each step of Create and checks
// that nothing it made is left: no record, cgroup, stage, or process.
func TestCreateRollsBack(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	brokenRootfs := filepath.Join(imagesDir, "broken", "rootfs")
	if err := os.MkdirAll(brokenRootfs, 0o755); err != nil { // no /workspace, /proc, ...
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// inject prepares the failure and returns what it made itself,
		// which is not the rollback's to remove.
		inject  func(t *testing.T, req *sandbox.CreateRequest) []string
		class   error
		mention string
	}{
		{"state dir exists", func(t *testing.T, req *sandbox.CreateRequest) []string {
			p := filepath.Join(b.opts.StateDir, req.ID)
			os.MkdirAll(p, 0o700)
			return []string{p}
		}, errdefs.ErrConflict, "already exists"},
		{"cgroup exists", func(t *testing.T, req *sandbox.CreateRequest) []string {
			d := b.cg.dirs(req.ID)
			p := d[len(d)-1]
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, nil, "cgroup"},
		{"stage busy", func(t *testing.T, req *sandbox.CreateRequest) []string {
			p := filepath.Join(b.stageDir, req.ID)
			os.Mkdir(p, 0o755)
			return []string{p}
		}, nil, "stage"},
		{"bubblewrap fails to set up the jail", func(t *testing.T, req *sandbox.CreateRequest) []string {
			req.Spec.Image = "broken"
			return nil
		}, nil, "bubblewrap"},
		{"guest missing inside", func(t *testing.T, req *sandbox.CreateRequest) []string {
			req.Guest = "/dev/null" // not a regular file
			return nil
		}, errdefs.ErrInvalid, "guest"},
		{"canceled", func(t *testing.T, req *sandbox.CreateRequest) []string {
			return nil
		}, nil, "context canceled"},
		// A deadline that passes while bubblewrap works (Create takes
		// about 12ms here): whichever step it hits must roll back.
		{"deadline mid-way", func(t *testing.T, req *sandbox.CreateRequest) []string {
			return nil
		}, nil, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := boxRequest(t, sandbox.Spec{})
			own := tt.inject(t, &req)
			ctx := t.Context()
			switch tt.name {
			case "canceled":
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			case "deadline mid-way":
				c, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
				defer cancel()
				ctx = c
			}
			_, err := b.Create(ctx, req)
			if err == nil {
				t.Fatal("Create worked")
			}
			if tt.class != nil {
				wantClass(t, err, tt.class)
			}
			if !strings.Contains(err.Error(), tt.mention) || !strings.Contains(err.Error(), req.ID) {
				t.Errorf("error %q does not name the sandbox and %q", err, tt.mention)
			}
			left := slices.DeleteFunc(leftovers(b, req.ID), func(p string) bool { return slices.Contains(own, p) })
			if len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			for _, p := range own {
				os.Remove(p)
			}
			if mps, _ := mountsUnder(b.stageDir); len(mps) != 1 {
				t.Errorf("stage mounts left: %v", mps)
			}
		})
	}
}

// TestConcurrentCreates runs several sandboxes created at once, each
// running one command.
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	const m = 8
	start := time.Now()
	var wg sync.WaitGroup
	for range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := startBox(t, b, sandbox.Spec{})
			if res, out, _ := x.run(t, guest.ExecRequest{Argv: []string{"cat", "/proc/sys/kernel/hostname"}}); res.ExitCode != 0 || out != hostname(x.id)+"\n" {
				t.Errorf("%s: %+v %q", x.id, res, out)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d sandboxes created concurrently, each running one command: %s", m, time.Since(start).Round(time.Millisecond))
}
