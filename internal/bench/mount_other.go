//go:build !linux

package bench

// mountsUnder is empty off Linux, where workspaces are never mounted.
func mountsUnder(string) ([]string, error) { return nil, nil }

func detach(string) {}

func quiesce() {}
