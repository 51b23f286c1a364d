package docker

import (
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/internal/hostbind"
)

// etcName is the mount point of the tmpfs of a sandbox's /etc files (see
// hostbind.Etc) in its bind directory.
const etcName = "etc"

// etcDir makes the tmpfs of sandbox id's /etc files, hostname its host
// name, and returns it with how to take it off the host.
func (b *Backend) etcDir(id, hostname string) (string, func() error, error) {
	dir := filepath.Join(b.bindPath(id), etcName)
	release, err := hostbind.Etc(dir, hostname)
	if err != nil {
		os.Remove(b.bindPath(id))
		return "", nil, err
	}
	return dir, func() error {
		err := release()
		os.Remove(b.bindPath(id)) // only when nothing else of the sandbox is in it
		return err
	}, nil
}
