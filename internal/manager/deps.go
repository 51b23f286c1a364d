package manager

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// Dependencies is dependency admission (package deps): it checks a
// request against the operator's approved manifest and fetches what it
// admits through the egress proxy's checks. The manager holds only this,
// so that the lifecycle core stays free of HTTP.
type Dependencies interface {
	// Admit decides spec ("npm:NAME@VERSION"). Admitted, it returns the
	// artifact, its digest verified, as a body the caller closes. Denied,
	// the error is an errdefs.ErrPolicyDenied naming the reason. The
	// Dependency describes the request as far as it was understood, on a
	// denial too.
	Admit(ctx context.Context, spec string) (apitypes.Dependency, io.ReadCloser, error)
}

// DependencyObserver is what an Observer may also be: told of every
// dependency request's outcome (the daemon's metrics).
type DependencyObserver interface {
	ObserveDependency(admitted bool)
}

// Event types of dependency admission.
const (
	EventDependencyAdmitted = "dependency.admitted"
	EventDependencyDenied   = "dependency.denied"
)

// AddDependency admits one package into workspace id: checked against the
// approved manifest, fetched from its pinned source, verified, and
// written through the file API at dep.Path (under .agentbox/deps/), from
// where the sandbox installs it offline. Both outcomes go to the event
// log. The workspace's sandbox, if any, keeps its network as it is: the
// daemon fetches, never the sandbox.
func (m *Manager) AddDependency(ctx context.Context, id, spec string) (apitypes.Dependency, error) {
	w, err := m.st.GetWorkspace(ctx, id)
	if err != nil {
		return apitypes.Dependency{}, err
	}
	if m.cfg.Dependencies == nil {
		err := fmt.Errorf("dependency %s: this daemon admits no dependencies (no dependencies.approved in its configuration): %w", spec, errdefs.ErrPolicyDenied)
		m.dependencyEvent(ctx, w, apitypes.Dependency{}, spec, err)
		return apitypes.Dependency{}, err
	}
	dep, body, err := m.cfg.Dependencies.Admit(ctx, spec)
	if err == nil {
		defer body.Close()
		err = m.writeDependency(ctx, id, dep.Path, body)
	}
	m.dependencyEvent(ctx, w, dep, spec, err)
	if err != nil {
		return apitypes.Dependency{}, err
	}
	m.log.InfoContext(ctx, "dependency admitted", KeyWorkspace, id, "spec", spec, "integrity", dep.Integrity, "path", dep.Path)
	return dep, nil
}

func (m *Manager) writeDependency(ctx context.Context, id, path string, body io.Reader) error {
	fs, release, err := m.Files(ctx, id, true)
	if err != nil {
		return err
	}
	defer release()
	if _, err := fs.Write(ctx, path, body, 0o644, true); err != nil {
		return fmt.Errorf("workspace %s: writing %s: %w", id, path, err)
	}
	w, err := m.st.GetWorkspace(ctx, id)
	if err == nil {
		m.setDirty(ctx, w, true)
	}
	return nil
}

// dependencyEvent records an admission, or a denial with its reason. A
// failure that is no decision (the source unreachable) is recorded as a
// denial too, with what went wrong: the agent got nothing either way.
func (m *Manager) dependencyEvent(ctx context.Context, w store.Workspace, dep apitypes.Dependency, spec string, err error) {
	typ := EventDependencyAdmitted
	d := map[string]any{"spec": spec, "ecosystem": dep.Ecosystem, "name": dep.Name, "version": dep.Version, "digest": dep.Integrity}
	if err != nil {
		typ = EventDependencyDenied
		d["reason"] = errdefs.Message(err)
		d["denied_by_policy"] = errors.Is(err, errdefs.ErrPolicyDenied)
	} else {
		d["source"], d["url"], d["path"], d["size"] = dep.Source, dep.URL, dep.Path, dep.Size
	}
	m.event(ctx, store.Event{Type: typ, RepoID: w.RepoID, WorkspaceID: w.ID}, d)
	if o, ok := m.cfg.Observer.(DependencyObserver); ok {
		o.ObserveDependency(err == nil)
	}
}
