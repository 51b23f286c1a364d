package manager

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/policy"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestExecRequestEnv pins how a command's environment is made: the image's ENV, the
// default PATH and HOME where it has none, the policy's variables, the request's; a
// later layer replaces an earlier entry of the same name in place.
func TestExecRequestEnv(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "canary-daemon") // never reaches a command
	withPolicy := sandbox.Spec{Policy: &policy.Policy{Env: map[string]string{"GOFLAGS": "-mod=mod", "LANG": "C.UTF-8"}}}
	tests := []struct {
		name     string
		spec     sandbox.Spec
		imageEnv []string
		req      []string
		tty      bool
		want     []string
	}{
		{
			name: "an image without ENV gets the defaults",
			want: []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.DefaultHome},
		},
		{
			name:     "the image's ENV first, in its order",
			imageEnv: []string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "GOPATH=/go", "HOME=/root"},
			want:     []string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "GOPATH=/go", "HOME=/root"},
		},
		{
			name:     "the policy over the image, the request over both",
			spec:     withPolicy,
			imageEnv: []string{"LANG=en_US.UTF-8", "PATH=/opt/bin:/bin"},
			req:      []string{"PATH=/bin", "X=1"},
			want:     []string{"LANG=C.UTF-8", "PATH=/bin", "HOME=" + sandbox.DefaultHome, "GOFLAGS=-mod=mod", "X=1"},
		},
		{
			name: "a terminal gets a TERM",
			tty:  true,
			want: []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.DefaultHome, "TERM=xterm-256color"},
		},
		{
			name:     "the image's TERM is kept",
			tty:      true,
			imageEnv: []string{"TERM=xterm"},
			want:     []string{"TERM=xterm", "PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.DefaultHome},
		},
		{
			name: "the request's TERM wins",
			tty:  true,
			req:  []string{"TERM=dumb"},
			want: []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.DefaultHome, "TERM=dumb"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := execRequest(tt.spec, guest.ExecRequest{Argv: []string{"true"}, Env: tt.req, Timeout: time.Second, TTY: tt.tty}, nil, imageRun{env: tt.imageEnv})
			if diff := cmp.Diff(tt.want, got.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExecRequestWorkdir: a request without a directory starts in the
// image's WORKDIR; one with its own keeps it.
func TestExecRequestWorkdir(t *testing.T) {
	img := imageRun{workdir: "/opt/app"}
	if got := execRequest(sandbox.Spec{}, guest.ExecRequest{Argv: []string{"true"}}, nil, img); got.Dir != "/opt/app" {
		t.Errorf("no directory: %q, want the image's WORKDIR", got.Dir)
	}
	if got := execRequest(sandbox.Spec{}, guest.ExecRequest{Argv: []string{"true"}, Dir: "/workspace/sub"}, nil, img); got.Dir != "/workspace/sub" {
		t.Errorf("the request's directory: %q", got.Dir)
	}
	if got := execRequest(sandbox.Spec{}, guest.ExecRequest{Argv: []string{"true"}}, nil, imageRun{}); got.Dir != "" {
		t.Errorf("no WORKDIR: %q, want the guest's default", got.Dir)
	}
}

// TestWritableHome: only a home under /tmp or an existing directory of the
// workspace is one commands can write; a link out of the workspace is not.
func TestWritableHome(t *testing.T) {
	files := t.TempDir()
	os.MkdirAll(filepath.Join(files, "home/app"), 0o755)
	os.Symlink("/etc", filepath.Join(files, "out"))
	for home, want := range map[string]bool{
		"/tmp/home/app": true, "/workspace": true, "/workspace/home/app": true,
		"/workspace/missing": false, "/workspace/out": false, "/workspacex": false,
		"/home/app": false, "/tmp": false, "": false, "relative": false,
	} {
		if got := writableHome(home, files); got != want {
			t.Errorf("writableHome(%q) = %v, want %v", home, got, want)
		}
	}
}

// TestCommandTerminal pins how an exec request's terminal is checked: the
// default size, the bounds, and a size without tty refused.
func TestCommandTerminal(t *testing.T) {
	tests := []struct {
		name       string
		req        apitypes.ExecRequest
		wantErr    bool
		cols, rows uint16
	}{
		{name: "no terminal", req: apitypes.ExecRequest{Sh: "true"}},
		{name: "the default size", req: apitypes.ExecRequest{Sh: "true", TTY: true}, cols: 80, rows: 24},
		{name: "one side given", req: apitypes.ExecRequest{Sh: "true", TTY: true, Cols: 132}, cols: 132, rows: 24},
		{name: "the largest", req: apitypes.ExecRequest{Sh: "true", TTY: true, Cols: 1000, Rows: 1000}, cols: 1000, rows: 1000},
		{name: "too wide", req: apitypes.ExecRequest{Sh: "true", TTY: true, Cols: 1001}, wantErr: true},
		{name: "negative", req: apitypes.ExecRequest{Sh: "true", TTY: true, Rows: -1}, wantErr: true},
		{name: "a size without tty", req: apitypes.ExecRequest{Sh: "true", Rows: 10}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Command(tt.req)
			if tt.wantErr {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Errorf("Command: %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || got.TTY != tt.req.TTY || got.Cols != tt.cols || got.Rows != tt.rows {
				t.Errorf("Command: %+v %v, want tty %v, %dx%d", got, err, tt.req.TTY, tt.cols, tt.rows)
			}
		})
	}
}
