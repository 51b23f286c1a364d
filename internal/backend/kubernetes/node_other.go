//go:build !linux

package kubernetes

import "errors"

var errNotLinux = errors.New("node-local work on a pod's cgroups and mounts is done on Linux only")

func podCgroup(uid string) (string, error) { return "", errNotLinux }

func limitPids(dir string, pids int64) error { return errNotLinux }

func containerPids(dir, id string) ([]int, error) { return nil, errNotLinux }

func dropTerminationLog(pid int) error { return errNotLinux }
