package initd

import "runtime"

// gVisor refuses PR_SET_CHILD_SUBREAPER from any thread but the thread
// group leader, and Go may run main elsewhere: keep main on the main
// thread until the process-wide prctls are done (see setupProcess).
func init() { runtime.LockOSThread() }
