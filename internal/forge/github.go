package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/internal/forge/forgeapi"
)

// github speaks the GitHub REST API (github.com and GitHub Enterprise
// Server): pulls for the PR itself, the issues API for its labels (every
// PR is an issue there).
type github struct{ *client }

func (g *github) Kind() string { return KindGitHub }

func (g *github) base(r Remote) string {
	if g.apiURL != "" {
		return g.apiURL
	}
	if r.Host == "github.com" {
		return "https://api.github.com"
	}
	return "https://" + r.Host + "/api/v3"
}

func (g *github) call(ctx context.Context, r Remote, method, path string, body, out any) error {
	return g.do(ctx, r, g.base(r), call{
		method: method, path: path, body: body, out: out,
		auth: func(h http.Header) { h.Set("Authorization", "Bearer "+g.token) },
		headers: map[string]string{
			"Accept":               "application/vnd.github+json",
			"X-GitHub-Api-Version": "2022-11-28",
		},
	})
}

func (g *github) DefaultBranch(ctx context.Context, r Remote) (string, error) {
	if err := forgeapi.ValidRemote(g.kind, r); err != nil {
		return "", err
	}
	var repo struct {
		DefaultBranch string `json:"default_branch"`
	}
	if err := g.call(ctx, r, http.MethodGet, "/repos/"+r.String(), nil, &repo); err != nil {
		return "", err
	}
	if repo.DefaultBranch == "" {
		return "", fmt.Errorf("github %s: the repository has no default branch (empty?)", r)
	}
	return repo.DefaultBranch, nil
}

// githubPull is the part of GitHub's pull request object we read.
type githubPull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	State   string `json:"state"`
	Head    struct {
		Ref string `json:"ref"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p githubPull) pr() PR { return PR{Number: p.Number, URL: p.HTMLURL, State: p.State} }

func (g *github) OpenOrUpdatePR(ctx context.Context, r Remote, req PRRequest) (PR, error) {
	if err := validRequest(g.kind, r, req); err != nil {
		return PR{}, err
	}
	labels := uniqueLabels(req.Labels)
	var notes []string
	req.Body, notes = fitBody(req.Body, githubMaxBody)
	pulls := "/repos/" + r.String() + "/pulls"
	return openOrUpdate(ctx, prSteps{
		head: req.Head, base: req.Base, notes: notes,
		find: func(ctx context.Context) (*PR, error) {
			// head is "owner:branch": the branch is pushed to the same repository.
			q := url.Values{"head": {r.Owner + ":" + req.Head}, "state": {"open"}, "per_page": {"100"}}
			var list []githubPull
			if err := g.call(ctx, r, http.MethodGet, pulls+"?"+q.Encode(), nil, &list); err != nil {
				return nil, err
			}
			// One open PR per head and base; prefer the one for our base.
			var found *PR
			for _, p := range list {
				if p.Head.Ref != req.Head {
					continue
				}
				pr := p.pr()
				if p.Base.Ref == req.Base {
					return &pr, nil
				}
				if found == nil {
					found = &pr
				}
			}
			return found, nil
		},
		create: func(ctx context.Context) (PR, error) {
			var p githubPull
			err := g.call(ctx, r, http.MethodPost, pulls, map[string]any{
				"title": req.Title, "body": req.Body, "head": req.Head, "base": req.Base,
			}, &p)
			return p.pr(), err
		},
		update: func(ctx context.Context, n int) (PR, error) {
			var p githubPull
			err := g.call(ctx, r, http.MethodPatch, pulls+"/"+strconv.Itoa(n), map[string]any{
				"title": req.Title, "body": req.Body, "base": req.Base,
			}, &p)
			return p.pr(), err
		},
		addLabels: func(ctx context.Context, n int) []string {
			// The issues API adds labels by name and creates the ones the
			// repository lacks. An empty list would remove every label: skip.
			if len(labels) == 0 {
				return nil
			}
			path := "/repos/" + r.String() + "/issues/" + strconv.Itoa(n) + "/labels"
			if err := g.call(ctx, r, http.MethodPost, path, map[string]any{"labels": labels}, nil); err != nil {
				return []string{fmt.Sprintf("labels %q not set: %v", labels, err)}
			}
			return nil
		},
	})
}
