// Package initd is the guest's side of agentbox: the init process that runs
// inside every sandbox, dials the daemon's socket, and runs commands.
//
// Each command runs under its own reaper, a copy of the guest binary
// started as "agentbox-guest reaper" that sets PR_SET_CHILD_SUBREAPER:
// whatever the command forks, even after setsid or a double fork, stays
// in the reaper's subtree, so that killing "every descendant of the reaper"
// kills the command's whole tree. The reaper starts the command, reports its
// status, and kills what the command left behind when it exits; the guest
// keeps one idle reaper ready so that a command does not wait for a Go
// runtime to start.
//
// The guest itself is PID 1 (or a subreaper under a runtime that keeps
// PID 1): it reaps every zombie, and kills any process that escaped its
// reaper because the reaper was killed from inside the sandbox.
package initd
