package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/anonmount"
)

// The engine binds /etc/hostname, /etc/hosts and /etc/resolv.conf into
// every container from files under its data root, whose host paths then
// show in the container's mount table (SECURITY.md H45); and the
// resolv.conf it writes for a container without a network is the host's
// own. The engine binds its files only where the container has no mount
// of its own, so the backend binds its own instead: from a small tmpfs
// made for each create in the sandbox's bind directory, where they show
// as "/hostname", "/hosts" and "/resolv.conf". The tmpfs leaves the host
// as soon as the container has started: its mount namespace holds copies.

// etcName is the tmpfs's mount point in a sandbox's bind directory.
const etcName = "etc"

// etcHosts is what the engine writes into /etc/hosts of a container
// without a network.
const etcHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"

// etcDir makes the tmpfs of sandbox id's /etc files, hostname its host
// name, and returns it with how to take it off the host. An empty
// resolv.conf: the sandbox has no network, and the names its proxy
// requests carry are resolved by the daemon.
func (b *Backend) etcDir(id, hostname string) (string, func() error, error) {
	dir := filepath.Join(b.bindPath(id), etcName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("/etc files: %w", err)
	}
	release := func() error {
		err := anonmount.Detach(dir)
		if rerr := os.Remove(dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("/etc files: %w", rerr)
		}
		os.Remove(b.bindPath(id)) // only when nothing else of the sandbox is in it
		return err
	}
	if err := anonmount.Tmpfs(dir, 64<<10, 16); err != nil {
		release()
		return "", nil, err
	}
	content := map[string]string{"hostname": hostname + "\n", "hosts": etcHosts, "resolv.conf": ""}
	for _, f := range etcFiles {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(content[f.name]), 0o644); err != nil {
			release()
			return "", nil, fmt.Errorf("/etc files: %w", err)
		}
	}
	return dir, release, nil
}
