// Command pause is the test cluster's pod sandbox image's only program: it
// holds a pod's namespaces open until the runtime stops it. Nothing can be
// pulled here, so setup-k8s.sh builds it and imports it into the cluster's
// containerd as the CRI's sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
