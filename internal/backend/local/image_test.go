package local

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/errdefs"
)

func TestImageRootfs(t *testing.T) {
	const dir = "/data/images"
	tests := []struct {
		image, kind string
		bad         bool
	}{
		{image: "agentbox/busybox:latest", kind: "busybox"},
		{image: "agentbox/busybox", kind: "busybox"},
		{image: "busybox", kind: "busybox"},
		{image: "agentbox/debian:bookworm", kind: "debian"},
		{image: "debian", kind: "debian"},
		{image: "myroot", kind: "myroot"},
		{image: "agentbox/debian:trixie", bad: true},
		{image: "busybox:1.36", bad: true},
		{image: "docker.io/library/ubuntu:24.04", bad: true},
		{image: "../etc", bad: true},
		{image: ".hidden", bad: true},
		{image: "a/b", bad: true},
		{image: "", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			kind, got, err := imageRootfs(dir, tt.image)
			if tt.bad {
				if !errors.Is(err, errdefs.ErrInvalid) {
					t.Fatalf("got %q, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, tt.kind, "rootfs"); got != want || kind != tt.kind {
				t.Errorf("got %s %s, want %s %s", kind, got, tt.kind, want)
			}
		})
	}
}
