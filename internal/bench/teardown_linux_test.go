package bench

import "golang.org/x/sys/unix"

// waitExited blocks until pid has exited, leaving it a zombie.
func waitExited(pid int) error {
	var info unix.Siginfo
	return unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
}
