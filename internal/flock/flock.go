// Package flock takes advisory file locks so that two daemons sharing one
// data directory never run the same clone or checkout at once.
package flock

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Lock is a held lock; Unlock releases it.
type Lock struct{ f *os.File }

// Acquire blocks until it holds an exclusive lock on path (created if
// needed) or ctx ends. flock(2) cannot be interrupted, so it polls with
// LOCK_NB; contention is rare and short (one clone or checkout).
func Acquire(ctx context.Context, path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	delay := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &Lock{f: f}, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	return l.f.Close()
}
