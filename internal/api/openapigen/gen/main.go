// Command gen writes agentbox's OpenAPI document to the file its argument
// names (go generate ./internal/api runs it).
package main

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/api/openapigen"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen FILE")
		os.Exit(2)
	}
	b, err := openapigen.Generate()
	if err == nil {
		err = os.WriteFile(os.Args[1], b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}
