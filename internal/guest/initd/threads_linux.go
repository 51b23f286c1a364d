package initd

import (
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/internal/guest"
)

// guestThreads is how many OS threads prewarmThreads adds to the half a
// dozen the guest has when it starts, for about 12 in all. Left alone it
// runs on 7 to 10 (main, sysmon, the template thread, the one blocked in
// wait4, one per P, and what bursts of work added), so this covers the
// peaks it reaches anyway; each thread costs a pid of the sandbox's budget.
const guestThreads = 6

// prewarmThreads makes the Go runtime hold about n OS threads now, while
// the sandbox is empty. The runtime never ends an idle thread, so the
// guest later needs no new one. That matters under a fork bomb: with the
// pids limit reached, a runtime that has to start a thread cannot, and
// dies ("failed to create new OS thread"), taking the sandbox with it.
//
// n goroutines each lock themselves to a thread and wait until all are
// locked, so n threads exist at once; unlocked again, the threads go back
// to the runtime's idle list instead of exiting.
func prewarmThreads(n int) {
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	for range n {
		locked.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

// prewarmCount is guestThreads, or what guest.PrewarmEnv says.
func prewarmCount() int {
	if v, ok := os.LookupEnv(guest.PrewarmEnv); ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 64 {
			return n
		}
	}
	return guestThreads
}
