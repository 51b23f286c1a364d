// Command nonet is the test cluster's CNI plugin: it gives a pod no
// network at all. containerd's CRI refuses a pod whose network result has
// no eth0 with an address, and the plugins Debian ships all connect eth0
// to something (a bridge, a veth to the host, a parent device), which a
// sandbox must not have. nonet makes nothing: it reports an eth0 with an
// address derived from the container's id, and the pod keeps only the
// loopback that containerd brings up itself. k8s-cluster.sh builds it and
// installs it in the cluster's private CNI directory.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

const cniVersion = "0.4.0"

func main() {
	switch os.Getenv("CNI_COMMAND") {
	case "ADD":
		conf, _ := io.ReadAll(os.Stdin)
		var c struct {
			CNIVersion string `json:"cniVersion"`
		}
		json.Unmarshal(conf, &c)
		if c.CNIVersion == "" {
			c.CNIVersion = cniVersion
		}
		// An address in 100.64.0.0/10 (shared address space), no route:
		// nothing is configured on any interface.
		h := sha256.Sum256([]byte(os.Getenv("CNI_CONTAINERID")))
		addr := fmt.Sprintf("100.%d.%d.%d/32", 64+int(h[0]&63), h[1], max(h[2], 1))
		out := map[string]any{
			"cniVersion": c.CNIVersion,
			"interfaces": []map[string]any{{"name": os.Getenv("CNI_IFNAME"), "sandbox": os.Getenv("CNI_NETNS")}},
			"ips":        []map[string]any{{"version": "4", "address": addr, "interface": 0}},
		}
		json.NewEncoder(os.Stdout).Encode(out)
	case "DEL", "CHECK", "GC", "STATUS":
	case "VERSION":
		json.NewEncoder(os.Stdout).Encode(map[string]any{
			"cniVersion":        cniVersion,
			"supportedVersions": []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0"},
		})
	default:
		fmt.Fprintf(os.Stderr, "nonet: unknown CNI_COMMAND %q\n", os.Getenv("CNI_COMMAND"))
		os.Exit(1)
	}
}
