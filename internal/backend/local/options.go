package local

import (
	"log/slog"
	"regexp"
)

// Name is the backend's name.
const Name = "local"

// LabelBackend names the backend in a sandbox's labels (the docker
// backends use the same key).
const LabelBackend = "agentbox.backend"

// guestEnvPrefix is the only prefix a guest environment variable may have.
const guestEnvPrefix = "AGENTBOX_GUEST_"

// Options configure the backend. StateDir and ImagesDir are required.
type Options struct {
	// StateDir holds one directory per sandbox with its record (pids,
	// cgroups, labels). It is only ever read by the daemon (mode 0700).
	StateDir string
	// ImagesDir is DATA/images: Spec.Image "agentbox/busybox:latest" (or
	// "busybox") runs ImagesDir/busybox/rootfs, "agentbox/debian:bookworm"
	// (or "debian") ImagesDir/debian/rootfs.
	ImagesDir string
	// ImageCache is where images from the engine are unpacked by id
	// (default image.DefaultCache, shared by every data dir).
	ImageCache string
	// Bwrap is the bubblewrap binary (default "bwrap", looked up in PATH).
	Bwrap string
	// CgroupRoot is where the cgroup file systems are mounted (default
	// /sys/fs/cgroup).
	CgroupRoot string
	// CgroupParent names the cgroup, under each hierarchy's root, that
	// holds one cgroup per sandbox (default "agentbox").
	CgroupParent string
	// StageDir is where the sources of a sandbox's mounts are bound for
	// bubblewrap to pick them up (see stage_linux.go). It must be reachable
	// by the sandbox user and hold nothing else; the backend mounts a
	// private tmpfs on it. Default /run/agentbox-local-<hash of StateDir>.
	StageDir string
	// Logger receives the backend's few log lines; nil discards them.
	Logger *slog.Logger
}

// validID matches sandbox ids the backend accepts: they name a directory,
// a cgroup and a host name.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)
