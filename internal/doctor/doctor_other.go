//go:build !linux

package doctor

import (
	"context"
	"runtime"
)

// runChecks reports the platform as unsupported: every backend agentbox has needs Linux
// (namespaces, overlayfs, a local Docker engine with runsc).
func runChecks(_ context.Context, _ Options) []Check {
	return []Check{{
		Name:   "platform",
		Status: StatusMissing,
		Detail: "agentbox runs on linux only; this is " + runtime.GOOS + "/" + runtime.GOARCH,
		Fix:    "run agentbox on a Linux host or VM",
	}}
}
