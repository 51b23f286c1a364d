package sandbox

import (
	"context"
	"time"
)

// Usage is what an environment's cgroup has counted since it started.
type Usage struct {
	// CPU is the CPU time of everything in the environment: the guest and
	// the commands, and under gVisor the sentry and gofer.
	CPU time.Duration
	// MemoryPeakBytes is the memory cgroup's high-water mark, page cache
	// included (cgroup v1 memory.max_usage_in_bytes, v2 memory.peak);
	// 0 when the kernel does not keep one.
	MemoryPeakBytes int64
}

// UsageReader is implemented by backends that can read an environment's
// cgroup accounting. The manager reads it when a sandbox stops, before
// the environment (and its cgroup) goes.
type UsageReader interface {
	// ReadUsage returns environment ref's usage so far. An environment
	// that is gone returns an error wrapping errdefs.ErrNotFound.
	ReadUsage(ctx context.Context, ref string) (Usage, error)
}
