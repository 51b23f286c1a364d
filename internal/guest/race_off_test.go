//go:build !race

package guest

// raceEnabled: see race_on_test.go.
const raceEnabled = false
