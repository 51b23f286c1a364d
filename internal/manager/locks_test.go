package manager

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestLockTableEmptiesAndExcludes checks that the lock table keeps no entry
// once nobody holds or waits for a lock, and that a lock still excludes
// while others wait for it (the entry must not be dropped under them).
func TestLockTableEmptiesAndExcludes(t *testing.T) {
	m := &Manager{locks: map[string]*keyLock{}}
	var wg sync.WaitGroup
	var tried atomic.Int64
	counters := make([]int, 4)
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				k := (g + i) % len(counters)
				id := fmt.Sprint("ws_", k)
				if i%7 == 0 {
					if l := m.lock(id); l.TryLock() {
						counters[k]++
						l.Unlock()
						tried.Add(1)
					}
					continue
				}
				if i%3 == 0 {
					l := m.lock(id)
					l.RLock()
					_ = counters[k]
					l.RUnlock()
					continue
				}
				l := m.lock(id)
				l.Lock()
				counters[k]++ // the race detector and the sum catch a lost exclusion
				l.Unlock()
			}
		})
	}
	wg.Wait()
	sum := 0
	for _, c := range counters {
		sum += c
	}
	want := int(tried.Load())
	for i := range 500 {
		if i%7 != 0 && i%3 != 0 {
			want += 16
		}
	}
	if sum != want {
		t.Errorf("counted %d increments under the locks, want %d", sum, want)
	}
	if n := m.lockEntries(); n != 0 {
		t.Errorf("lock table holds %d entries once every lock is released, want 0", n)
	}
}
