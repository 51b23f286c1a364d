//go:build !amd64

package main

// int80 has no meaning off amd64: there is no i386 entry to try.
func int80(trap uintptr) uintptr { return 0 }
