package initd

import "runtime"

// gVisor refuses PR_SET_CHILD_SUBREAPER from any thread but the thread
// group leader, and Go may run main elsewhere: keep main on the main
// thread until the process-wide prctls are done (see setupProcess). A
// reaper keeps it there for good: it forks commands from the thread that
// holds its seccomp filter (see RunReaper).
func init() { runtime.LockOSThread() }
