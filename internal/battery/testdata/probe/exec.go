package main

import (
	"os"
	"os/exec"
)

type (
	execCmd = exec.Cmd
	exitErr = exec.ExitError
)

// selfCmd runs this binary again with args, with its own stdout passed on.
func selfCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = "probe"
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	return cmd
}

// startSelf starts this binary again with args and does not wait.
func startSelf(args ...string) *exec.Cmd {
	cmd := selfCmd(args...)
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	return cmd
}
