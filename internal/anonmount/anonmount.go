// Package anonmount makes the mounts that agentbox shows to sandboxes
// without naming a host path in their mount table entries (SECURITY.md
// H45).
//
// A sandbox reads its mount table in /proc/self/mountinfo, and every
// entry there carries two things the host chose: the entry's root (the
// path, inside the mounted file system, of the directory or file that was
// bound) and the file system's options. A bind of a host directory shows
// that directory's path on its file system as its root, so what a sandbox
// gets bound must sit at or near the root of a file system of its own.
// An overlay shows its layers as the strings it was given, so its layers
// are named from a thread whose root and working directory make short
// names mean them: "lowerdir=/" after a chroot into the lower layer,
// "upperdir=upper" after a chdir next to it.
//
// This package gives those mounts:
//   - Overlay: a workspace's overlay, "lowerdir=/,upperdir=upper,workdir=work";
//   - View: a read-only overlay of one host directory, "lowerdir=/:.", so
//     that a file bound from it shows as "/name";
//   - Tmpfs: a small tmpfs, so that what is bound from it shows as "/" or
//     "/name".
package anonmount

// Source is the source (the first field after the separator in
// mountinfo) of the mounts this package makes, besides workspace
// overlays, which keep "overlay".
const Source = "agentbox"
