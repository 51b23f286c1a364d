package main

// int80 makes system call trap through the i386 entry (int $0x80).
func int80(trap uintptr) uintptr
