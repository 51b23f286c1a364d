package sqlstore

import "time"

// SetHoldCheck sets how often a held lock is checked, for the tests.
func SetHoldCheck(d time.Duration) (restore func()) {
	old := holdCheck
	holdCheck = d
	return func() { holdCheck = old }
}

// DaemonLockKey is the daemon lock's key.
const DaemonLockKey = daemonLockKey

// Prepared is how many statements s keeps prepared.
func Prepared(s *Store) int {
	s.prepared.mu.Lock()
	defer s.prepared.mu.Unlock()
	return len(s.prepared.m)
}

// SetMaxConns bounds s's connection pool.
func SetMaxConns(s *Store, n int) { s.db.SetMaxOpenConns(n) }
