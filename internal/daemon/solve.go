package daemon

import (
	"github.com/agentbox/agentbox/internal/secrets"
	"github.com/agentbox/agentbox/internal/solve"
	"github.com/agentbox/agentbox/internal/solve/llm"
)

// solveProviders opens the agent loop's model providers, their keys read
// from the daemon's secret store (or its own environment): a sandbox
// never holds them.
func solveProviders(box *secrets.Box) solve.ProviderFunc {
	return llm.Open(box)
}
