package image

import (
	"io"
	"slices"
)

// ToolsName is the Debian image with the language tools (issue 11): what
// scripts/test.sh builds with `agentbox image build --kind debian
// --packages ... --tag agentbox/debian:tools`, what the battery's tool
// tests run, and where `agentbox bench suite` runs networkx's own suite.
const ToolsName = "agentbox/debian:tools"

// ToolsPackages are the tool image's packages beyond the Debian image's
// own (git, python3, pytest, make, gcc, procps). networkx ships its own
// test suite: the real suite the battery and the bench run.
var ToolsPackages = []string{"golang-go", "nodejs", "npm", "unzip", "zip", "python3-networkx"}

// ToolsOptions build the tool image into the engine only (the local
// backend unpacks it from there), its debootstrap result cached in
// cacheDir; a build finds an image of the same recipe and does nothing.
func ToolsOptions(cacheDir string, progress io.Writer) BuildOptions {
	return BuildOptions{Kind: KindDebian, Packages: slices.Clone(ToolsPackages), Name: ToolsName, CacheDir: cacheDir, Progress: progress}
}
