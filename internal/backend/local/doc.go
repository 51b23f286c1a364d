// Package local is the execution backend that needs no container engine:
// each sandbox is a bubblewrap jail on this host, in its own user, pid,
// network (loopback only), mount, ipc, uts and cgroup namespaces, over the
// read-only root file system of an image unpacked by internal/image, with
// cgroup limits (v1 or v2), a seccomp filter, and the agentbox guest as
// its init.
//
// Lifecycle. The daemon starts bubblewrap from one dedicated thread (see
// spawner_linux.go) with --die-with-parent: bubblewrap's monitor dies with
// the daemon, and the jail with its monitor. A sandbox therefore never
// outlives the daemon that made it; a restarted daemon finds the records
// of the dead ones in StateDir (List reports them stopped) and Remove
// deletes their cgroups and records. The jail's init is the guest itself
// (--as-pid-1): when it dies the kernel kills the whole pid namespace, and
// no process inside can kill it.
//
// Identity. bubblewrap runs as the sandbox user (CreateRequest.UID/GID),
// never as root, so the jail's user namespace maps that user to itself:
// what it writes in /workspace belongs to it on the host, and host root is
// not mapped inside at all. Because bubblewrap then resolves bind sources
// as that user, the backend first binds the sources into a stage directory
// that user can reach (stage_linux.go). With a guest user of its own
// (CreateRequest.GuestUID), bubblewrap runs as that user instead, grants
// the guest CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SETPCAP (ambient),
// and waits while the backend writes the namespace's maps: both users,
// each to itself, and still no root (bubblewrap, unprivileged, can map
// only its own). Commands run as the sandbox user with no capability.
//
// Limits. The jail is in its cgroups before it forks anything: on v1 the
// spawner thread moves itself into them around the fork; on v2 clone3
// puts bubblewrap there (CLONE_INTO_CGROUP). The cgroup namespace is thus
// rooted at the sandbox's own cgroup. Memory has no swap; /tmp and
// /dev/shm are tmpfs mounts of Limits.TmpBytes each, with an inode limit,
// charged to the sandbox's memory.
//
// Warm pool. The backend implements sandbox.Attacher: a jail started
// before its workspace is known has an empty, read-only /workspace that
// is a slave of a mount in the stage, and Attach mounts the workspace
// there, nosuid,nodev, from where the kernel propagates it into the
// running jail (pool_linux.go).
//
// System calls. A deny list assembled here in classic BPF
// (seccomp_linux.go), loaded by bubblewrap right before it executes the
// guest, under no_new_privs: the 32-bit entries kill the process, namespace
// and mount calls, bpf, perf, io_uring, keyrings, modules, kexec, clock
// setting, ptrace and its kin, AF_PACKET and AF_VSOCK sockets and TIOCSTI
// fail with EPERM.
//
// Not here: Landlock. It cannot be applied from outside the jail
// (bubblewrap must still mount after any Landlock restriction, which
// Landlock forbids), so it belongs in the guest, before it serves.
package local
