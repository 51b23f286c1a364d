package daemon

import (
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/telemetry"
)

// The metrics count the collector's removals: the manager finds this by
// type assertion on its Observer.
var _ manager.GCObserver = (*telemetry.Metrics)(nil)
