package solve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// Dependency admission in the loop: the coder may ask for a package
// with add_dependency. The sandbox has no network, so the daemon admits
// it or denies it against the operator's approved manifest (manager
// AddDependency). An admitted package is installed in the sandbox,
// offline; a denial's reason goes back to the model, which then knows to
// do without the package or ask for an approved version.
//
// This file is the whole of it but for two hooks: the coder offers
// dependencyTool and keeps its calls in Patch.Dependencies (roles.go),
// and ApplyPatch runs them first (applyDependencies). A coder that gets
// tool results back turn by turn calls DependencyToolResult instead.

// dependencyTool is the coder's add_dependency.
var dependencyTool = Tool{Name: "add_dependency",
	Description: "Ask for a package the fix needs that the workspace lacks, as ECOSYSTEM:NAME@VERSION with one exact version (npm:is-number@7.0.0). " +
		"The sandbox has no network: only packages the operator approved at exactly that version are admitted, then installed offline before the tests run. " +
		"A range (^1.2.0), a tag (latest) or an unapproved package is denied, and the reason comes back: then do without it.",
	Parameters: schema(`{"type":"object","properties":{"spec":{"type":"string","description":"ECOSYSTEM:NAME@VERSION, one exact version"}},"required":["spec"]}`)}

// Dependencies is what an Env may also be: able to admit packages into
// its workspace and install them in its sandbox.
type Dependencies interface {
	// AddDependency admits spec and installs it; a denial is an error
	// whose message names the package and the reason.
	AddDependency(ctx context.Context, spec string) (apitypes.Dependency, error)
}

// dependencySpec reads an add_dependency call's arguments.
func dependencySpec(args json.RawMessage) (string, error) {
	var a struct {
		Spec string `json:"spec"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("the model's %s arguments: %w", dependencyTool.Name, err)
	}
	if strings.TrimSpace(a.Spec) == "" {
		return "", fmt.Errorf("an %s call names no package", dependencyTool.Name)
	}
	return a.Spec, nil
}

func addDependency(ctx context.Context, env Env, spec string) (apitypes.Dependency, error) {
	de, ok := env.(Dependencies)
	if !ok {
		return apitypes.Dependency{}, fmt.Errorf("dependency %s denied: this run admits no dependencies", spec)
	}
	return de.AddDependency(ctx, spec)
}

// applyDependencies admits and installs the patch's packages, in order;
// the first denial stops the patch, and its reason becomes the feedback
// of the next turn.
func applyDependencies(ctx context.Context, env Env, p Patch) error {
	for _, spec := range p.Dependencies {
		if _, err := addDependency(ctx, env, spec); err != nil {
			return err
		}
	}
	return nil
}

// dependencyInstall bounds installing an admitted package in the sandbox.
const dependencyInstall = 3 * time.Minute

// AddDependency admits spec into the workspace (the daemon fetches and
// verifies it) and installs it in the sandbox, offline. The denial's
// message is the manager's: it names the package and the reason.
func (e WorkspaceEnv) AddDependency(ctx context.Context, spec string) (apitypes.Dependency, error) {
	d, err := e.M.AddDependency(ctx, e.WS, spec)
	if err != nil {
		return d, errors.New(errdefs.Message(err))
	}
	out, err := e.Exec(ctx, d.Install, dependencyInstall)
	if err != nil {
		return d, fmt.Errorf("dependency %s admitted, but installing it failed: %w", spec, err)
	}
	if out.ExitCode != 0 || out.TimedOut {
		return d, fmt.Errorf("dependency %s admitted, but %q failed (exit %d):\n%s", spec, d.Install, out.ExitCode, Fence(out.Stderr+out.Stdout))
	}
	return d, nil
}
