package guest

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the pid and uid of the process at the other end of c, as
// the kernel recorded them when it connected; -1 when unknown.
func peerCred(c *net.UnixConn) (pid, uid int) {
	pid, uid = -1, -1
	rc, err := c.SyscallConn()
	if err != nil {
		return pid, uid
	}
	rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid, uid = int(cred.Pid), int(cred.Uid)
		}
	})
	return pid, uid
}
