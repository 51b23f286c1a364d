// Package hostbind makes the host-side binds that container backends hand
// to their runtimes as a sandbox's /workspace.
//
// The workspace must be nosuid,nodev inside the sandbox (SECURITY.md B14).
// A bind mount keeps the flags of the mount it is taken from, but neither
// Docker nor a kubelet can add flags to a bind. So a workspace that
// already sits on a nosuid,nodev mount (the overlay workspace driver
// mounts so) is bound as is; any other gets a nosuid,nodev bind of its
// own in a directory of the sandbox's, which the runtime then binds into
// the container.
package hostbind

// EtcFile is one of the /etc files a backend binds over its runtime's own.
type EtcFile struct{ Name, Target string }

// EtcFiles are the files Etc makes: their names in its tmpfs, and where
// the sandbox sees them.
var EtcFiles = []EtcFile{
	{"hostname", "/etc/hostname"},
	{"hosts", "/etc/hosts"},
	{"resolv.conf", "/etc/resolv.conf"},
}
