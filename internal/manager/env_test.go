package manager

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := execRequest(tt.spec, guest.ExecRequest{Argv: []string{"true"}, Env: tt.req, Timeout: time.Second}, nil, imageRun{env: tt.imageEnv})
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
