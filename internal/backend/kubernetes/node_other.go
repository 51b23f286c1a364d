//go:build !linux

package kubernetes

import "errors"

var errNotLinux = errors.New("node-local work on a pod's cgroups and mounts is done on Linux only")

func limitPids(uid string, pids int64) error { return errNotLinux }

func containerPids(uid, id string) ([]int, error) { return nil, errNotLinux }

func dropTerminationLog(pid int) error { return errNotLinux }
