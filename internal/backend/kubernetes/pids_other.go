//go:build !linux

package kubernetes

import "errors"

func limitPids(uid string, pids int64) error {
	return errors.New("per-pod pids limits are set through the node's cgroups, on Linux only")
}
