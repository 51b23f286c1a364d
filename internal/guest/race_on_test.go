//go:build race

package guest

// raceEnabled: under the race detector, sync.Pool drops a quarter of what
// it is given, so allocation counts say nothing about pooling.
const raceEnabled = true
