package daemon

import (
	"github.com/agentbox/agentbox/internal/manager"
	"github.com/agentbox/agentbox/internal/solve"
)

// solveProviders opens the model providers of the agent loop; nil while
// only the scripted model is built in.
func solveProviders(m *manager.Manager) solve.ProviderFunc {
	return nil
}
