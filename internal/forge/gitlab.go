package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/forge/forgeapi"
)

// gitlab speaks the GitLab REST API v4. A pull request is a merge request
// there, numbered by its iid; a project is addressed by its URL-encoded
// full path, so that nested groups need no lookup.
type gitlab struct{ *client }

func (g *gitlab) Kind() string { return KindGitLab }

func (g *gitlab) base(r Remote) string {
	if g.apiURL != "" {
		return g.apiURL
	}
	return "https://" + r.Host + "/api/v4"
}

// project is the API path of r's project: "/projects/group%2Fsub%2Frepo".
func (g *gitlab) project(r Remote) string {
	return "/projects/" + url.PathEscape(r.String())
}

func (g *gitlab) call(ctx context.Context, r Remote, method, path string, body, out any) error {
	return g.do(ctx, r, g.base(r), call{
		method: method, path: path, body: body, out: out,
		// GitLab takes personal, project and group access tokens, and OAuth
		// tokens, as a bearer token.
		auth: func(h http.Header) { h.Set("Authorization", "Bearer "+g.token) },
	})
}

func (g *gitlab) DefaultBranch(ctx context.Context, r Remote) (string, error) {
	if err := forgeapi.ValidRemote(g.kind, r); err != nil {
		return "", err
	}
	var p struct {
		DefaultBranch string `json:"default_branch"`
	}
	if err := g.call(ctx, r, http.MethodGet, g.project(r), nil, &p); err != nil {
		return "", err
	}
	if p.DefaultBranch == "" {
		return "", fmt.Errorf("gitlab %s: the project has no default branch (empty?)", r)
	}
	return p.DefaultBranch, nil
}

// gitlabMR is the part of GitLab's merge request object we read.
type gitlabMR struct {
	IID             int    `json:"iid"`
	WebURL          string `json:"web_url"`
	State           string `json:"state"`
	SourceBranch    string `json:"source_branch"`
	TargetBranch    string `json:"target_branch"`
	ProjectID       int    `json:"project_id"`
	SourceProjectID int    `json:"source_project_id"`
}

func (m gitlabMR) pr() PR { return PR{Number: m.IID, URL: m.WebURL, State: m.State} }

func (g *gitlab) OpenOrUpdatePR(ctx context.Context, r Remote, req PRRequest) (PR, error) {
	if err := validRequest(g.kind, r, req); err != nil {
		return PR{}, err
	}
	labels := uniqueLabels(req.Labels)
	var notes []string
	req.Body, notes = fitBody(req.Body, otherMaxBody)
	for _, l := range labels {
		// The API takes labels as one comma-separated string.
		if strings.Contains(l, ",") {
			return PR{}, fmt.Errorf("gitlab %s: label %q: GitLab labels cannot hold a comma: %w", r, l, errdefs.ErrInvalid)
		}
	}
	mrs := g.project(r) + "/merge_requests"
	return openOrUpdate(ctx, prSteps{
		head: req.Head, base: req.Base, notes: notes,
		find: func(ctx context.Context) (*PR, error) {
			q := url.Values{"state": {"opened"}, "source_branch": {req.Head}, "per_page": {"100"}}
			var list []gitlabMR
			if err := g.call(ctx, r, http.MethodGet, mrs+"?"+q.Encode(), nil, &list); err != nil {
				return nil, err
			}
			var found *PR
			for _, m := range list {
				// Only a merge request from this project's own branch: a fork's
				// branch of the same name is someone else's.
				if m.SourceBranch != req.Head || m.SourceProjectID != m.ProjectID {
					continue
				}
				pr := m.pr()
				if m.TargetBranch == req.Base {
					return &pr, nil
				}
				if found == nil {
					found = &pr
				}
			}
			return found, nil
		},
		// A label the project lacks is created by GitLab as a project label.
		create: func(ctx context.Context) (PR, error) {
			body := map[string]any{
				"source_branch": req.Head, "target_branch": req.Base,
				"title": req.Title, "description": req.Body,
			}
			if len(labels) > 0 {
				body["labels"] = strings.Join(labels, ",")
			}
			var m gitlabMR
			err := g.call(ctx, r, http.MethodPost, mrs, body, &m)
			return m.pr(), err
		},
		update: func(ctx context.Context, iid int) (PR, error) {
			body := map[string]any{"title": req.Title, "description": req.Body, "target_branch": req.Base}
			if len(labels) > 0 {
				body["add_labels"] = strings.Join(labels, ",")
			}
			var m gitlabMR
			err := g.call(ctx, r, http.MethodPut, mrs+"/"+strconv.Itoa(iid), body, &m)
			return m.pr(), err
		},
	})
}
