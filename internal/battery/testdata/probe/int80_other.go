//go:build !amd64

package main

const hasInt80 = false

// int80 has no meaning off amd64: there is no i386 entry to try.
func int80(trap, a1, a2, a3 uintptr) uintptr { return 0 }
