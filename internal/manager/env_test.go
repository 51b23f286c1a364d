package manager

import (
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
			got := execRequest(tt.spec, guest.ExecRequest{Argv: []string{"true"}, Env: tt.req, Timeout: time.Second}, nil, tt.imageEnv)
			if diff := cmp.Diff(tt.want, got.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
