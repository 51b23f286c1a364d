package manager

import "sync"

// keyLock is one object's lock in the manager's lock table. It is in the
// table only while someone holds it or waits for it: each lock call takes
// one reference, which its one Unlock or RUnlock gives back, and the last
// one out removes the entry. The table used to keep an entry for every
// workspace ever seen, two per workspace, which a long-running daemon
// with many short tasks only ever grew.
type keyLock struct {
	mu   sync.RWMutex
	m    *Manager
	id   string
	refs int // under m.locksMu
}

// Lock locks for writing.
func (l *keyLock) Lock() { l.mu.Lock() }

// RLock locks for reading.
func (l *keyLock) RLock() { l.mu.RLock() }

// TryLock locks for writing if nobody holds the lock; when it cannot, it
// gives back the reference, and the caller must not unlock.
func (l *keyLock) TryLock() bool {
	if l.mu.TryLock() {
		return true
	}
	l.put()
	return false
}

// TryRLock locks for reading if no writer holds the lock; when it cannot,
// it gives back the reference, and the caller must not unlock.
func (l *keyLock) TryRLock() bool {
	if l.mu.TryRLock() {
		return true
	}
	l.put()
	return false
}

// Unlock unlocks for writing and gives back the reference.
func (l *keyLock) Unlock() {
	l.mu.Unlock()
	l.put()
}

// RUnlock unlocks for reading and gives back the reference.
func (l *keyLock) RUnlock() {
	l.mu.RUnlock()
	l.put()
}

func (l *keyLock) put() {
	l.m.locksMu.Lock()
	defer l.m.locksMu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(l.m.locks, l.id)
	}
}

// lock returns id's lock with a reference taken: the caller must lock it
// and unlock it exactly once (or try to lock it once, and unlock it only
// if that succeeded).
func (m *Manager) lock(id string) *keyLock {
	m.locksMu.Lock()
	defer m.locksMu.Unlock()
	l, ok := m.locks[id]
	if !ok {
		l = &keyLock{m: m, id: id}
		m.locks[id] = l
	}
	l.refs++
	return l
}

// lockEntries is the size of the lock table (tests).
func (m *Manager) lockEntries() int {
	m.locksMu.Lock()
	defer m.locksMu.Unlock()
	return len(m.locks)
}
