// Package diskusage measures how much disk a directory tree really takes,
// the way du does: allocated blocks rather than apparent sizes (a sparse
// file image counts what it holds), every inode once however many hard
// links reach it, and never a byte of a file system mounted inside the
// tree (an overlay's merged view, a loop-mounted workspace image: its
// image file is counted, its contents are not).
package diskusage

// Usage is the result of measuring a data dir.
type Usage struct {
	// Bytes is the space the tree takes.
	Bytes int64 `json:"bytes"`
	// Method is how it was measured: "statfs" when the tree is a file
	// system of its own (its used blocks), else "walk".
	Method string `json:"method"`
}

// Measurement methods.
const (
	MethodStatfs = "statfs"
	MethodWalk   = "walk"
)
