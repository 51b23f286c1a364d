package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/bench"
	"github.com/agentbox/agentbox/internal/testutil/pgtest"
)

// TestLoadThreeNodes is the load test against three daemons sharing one
// PostgreSQL, each on its own data dir: 32 clients spread round-robin
// over the nodes, so that most requests are about an object another node
// owns and are forwarded; new workspaces are placed on the least loaded
// node. Every check of the one-node load test holds: no error, nothing
// left on any node.
func TestLoadThreeNodes(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Load(t.Context(), bench.LoadOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t)},
		Clients:       32,
		Duration:      20 * time.Second,
		Nodes:         3,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("load checks failed\n%s", log.String())
	}
	for _, op := range res.Ops {
		if op.Count == 0 {
			t.Errorf("operation %s never completed", op.Op)
		}
	}
}

// TestKill9Node kills one of three daemons sharing PostgreSQL with
// SIGKILL while 32 clients write through all three (files through the
// API, files written by commands in sandboxes), the workspaces on shared
// storage (the copy driver; one machine's disk is shared by its data
// dirs). Every write any node acknowledged is read back afterwards
// through a survivor, the dead node's workspaces included: a survivor
// adopted them once the dead node's lease lapsed, and marked its
// sandboxes lost. Then the load runs on the two survivors with no error,
// and everything is removed through them.
func TestKill9Node(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Failover(t.Context(), bench.FailoverOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t),
			NodeHeartbeat: time.Second, NodeShared: true, WorkspaceDriver: "copy", NoDiskQuota: true},
		Nodes: 3, Clients: 32, Before: 10 * time.Second, After: 10 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("failover checks failed\n%s", log.String())
	}
	// The lease is 3 heartbeats of 1s: a survivor acts within a few
	// beats of it.
	if res.LostAfter > 10*time.Second {
		t.Errorf("the killed node's sandboxes were lost %s after the kill, want within 10s", res.LostAfter)
	}
}

// TestKill9NodeUnshared is TestKill9Node without shared storage (the
// default driver and disk quotas): nobody adopts the dead node's
// workspaces; reading a write acknowledged in one fails while it is down,
// unavailable and naming it, and succeeds once it is started again on
// its data dir. The survivors serve everything else with no error.
func TestKill9NodeUnshared(t *testing.T) {
	requireDocker(t)
	var log bytes.Buffer
	res, err := bench.Failover(t.Context(), bench.FailoverOptions{
		DaemonOptions: bench.DaemonOptions{Binary: binary, Store: pgtest.NewDatabase(t), NodeHeartbeat: time.Second},
		Nodes:         3, Clients: 9, Before: 5 * time.Second, After: 5 * time.Second,
	}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Logf("\n%s", out.String())
	if !res.OK() {
		t.Errorf("failover checks failed\n%s", log.String())
	}
	if res.Adopted != 0 {
		t.Errorf("%d workspaces adopted without shared storage", res.Adopted)
	}
}
