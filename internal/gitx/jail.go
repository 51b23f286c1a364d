package gitx

// Jail confines one git process to a private view of the file system: an
// empty root that holds the operating system's programs (/usr, read-only)
// and the host paths listed here, each at its own path, and nothing else.
// Host-side git over a workspace runs so because whatever runs in the
// workspace controls its tree: git resolves paths in it by name, and a
// sandbox that exchanges a directory with a symlink between git's lstat and
// its open would otherwise make a root git read, hash and hand back any
// host file (SECURITY.md H43). Inside the jail a link to /etc, to the data
// dir or through ".." leads only to the empty root or to the paths listed,
// whatever the timing: the guarantee does not depend on winning a race.
//
// No /proc is mounted (so no /proc/self/root), /dev holds only /dev/null
// and /dev/urandom, /tmp is an empty tmpfs, and the process keeps one
// capability, CAP_DAC_READ_SEARCH, to read the sandbox user's files
// whatever their modes; it cannot mount, change owners, or write anything
// but Writable.
type Jail struct {
	// ReadOnly are paths the process may read (the workspace's files, the
	// object stores its git directory borrows from).
	ReadOnly []string
	// Writable are paths it may also write (the host-private git
	// directory).
	Writable []string
	// Network adds, read-only, what a git that reaches a remote needs of
	// /etc: name resolution and the system's certificate roots. (The jail
	// has the host's network: only a push, whose remote the user named,
	// sets it.)
	Network bool
}
