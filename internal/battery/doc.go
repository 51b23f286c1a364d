// Package battery is the hostile battery of SECURITY.md, sections A
// (privilege and kernel surface), B (file system inside the sandbox), F
// (resources and lifecycle) and G (persistence and policy integrity), run
// against every backend (docker, gvisor, local) through the manager, the
// path users take, with the defaults they get.
//
// Every probe is one static program (testdata/probe) that runs unconfined
// on the host first, as a control, and then inside each backend's sandbox.
// The tests judge from the host: canary files and variables only the host
// holds, host process and container censuses, the sandbox's cgroups, and
// the files the sandbox left in its workspace. The package has only tests;
// they need root, Docker with runsc and bubblewrap, and skip without them
// unless AGENTBOX_REQUIRE_SETUP=1, where a missing piece is a failure.
package battery
