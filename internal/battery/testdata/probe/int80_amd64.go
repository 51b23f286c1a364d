package main

// hasInt80 says this architecture has an i386 entry to try.
const hasInt80 = true

// int80 makes a system call through the i386 entry (int $0x80) and returns
// the raw result (a negative errno on failure).
func int80(trap, a1, a2, a3 uintptr) uintptr
