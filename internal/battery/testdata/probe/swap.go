package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// swap exchanges pairs of names in dir for seconds, as fast as it can:
// each pair a directory and a symlink, so that a host-side walk that
// resolves a path through the directory meets the link at that name
// (SECURITY.md H43). It uses renameat2(RENAME_EXCHANGE), and plain renames
// through a third name where the runtime lacks it. It swaps for 75 ms of
// every 100 and rests the other 25 with the names as they were, so that
// host operations that a changing tree makes fail (git refuses a file that
// vanishes under it) also get to finish some of the time, and so are
// attacked while they read. It prints the method and the number of swaps.
func swap(seconds int64, dir string, pairs []string) {
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		fmt.Fprintln(os.Stderr, "probe: swap SECONDS DIR A B [A B]...")
		os.Exit(2)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: swap: opening %s: %v\n", dir, err)
		os.Exit(1)
	}
	exchange := unix.Renameat2(fd, pairs[0], fd, pairs[1], unix.RENAME_EXCHANGE) == nil
	if exchange {
		unix.Renameat2(fd, pairs[0], fd, pairs[1], unix.RENAME_EXCHANGE)
	}
	const period, busy = 100 * time.Millisecond, 75 * time.Millisecond
	start := time.Now()
	end := start.Add(time.Duration(seconds) * time.Second)
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < len(pairs); i += 2 {
		a, b := pairs[i], pairs[i+1]
		wg.Add(1)
		go func() {
			defer wg.Done()
			once := func() bool {
				if exchange {
					return unix.Renameat2(fd, a, fd, b, unix.RENAME_EXCHANGE) == nil
				}
				// a -> tmp, b -> a, tmp -> b.
				tmp := a + ".swap"
				return errors.Join(unix.Renameat(fd, a, fd, tmp), unix.Renameat(fd, b, fd, a), unix.Renameat(fd, tmp, fd, b)) == nil
			}
			swapped := false // the names are the other way round
			for {
				now := time.Now()
				if now.After(end) {
					if swapped {
						once()
					}
					return
				}
				if phase := now.Sub(start) % period; phase >= busy && !swapped {
					time.Sleep(period - phase)
					continue
				}
				if once() {
					swapped = !swapped
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	method := "exchange"
	if !exchange {
		method = "rename"
	}
	fmt.Printf("swap method=%s swaps=%d\n", method, n.Load())
}
