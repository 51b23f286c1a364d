package sandbox

import "context"

// OOMCounter is implemented by backends that can tell how many processes
// the kernel has killed for an environment's memory limit. The manager
// reads it before and after an exec to report the exec's SIGKILL as an
// out-of-memory kill rather than an ordinary signal.
type OOMCounter interface {
	// OOMKills is the environment's memory cgroup oom_kill count so far
	// (cgroup v1 memory.oom_control, v2 memory.events). An environment
	// that is gone returns an error wrapping errdefs.ErrNotFound.
	OOMKills(ctx context.Context, ref string) (uint64, error)
}
