package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/forge/forgeapi"
)

// gitea speaks the Gitea API v1, which Forgejo shares. Its issue label
// calls take label ids (names only in recent Gitea), and adding a label the
// repository lacks does not create it: labels are resolved to ids first,
// and missing ones are created as repository labels. A token that may not
// create labels (no write:issue scope) gets a note per label instead.
type gitea struct{ *client }

func (g *gitea) Kind() string { return KindGitea }

// Pages walked when looking for an open PR or a label: 50 a page (Gitea's
// default MAX_RESPONSE_ITEMS), so up to 1000 of each.
const (
	giteaPageSize = 50
	giteaMaxPages = 20
)

// labelColor is what a created label looks like: a neutral grey.
const labelColor = "#ededed"

func (g *gitea) base(r Remote) string {
	if g.apiURL != "" {
		return g.apiURL
	}
	return "https://" + r.Host + "/api/v1"
}

func (g *gitea) call(ctx context.Context, r Remote, method, path string, body, out any) error {
	return g.do(ctx, r, g.base(r), call{
		method: method, path: path, body: body, out: out,
		auth: func(h http.Header) { h.Set("Authorization", "token "+g.token) },
	})
}

func (g *gitea) DefaultBranch(ctx context.Context, r Remote) (string, error) {
	if err := forgeapi.ValidRemote(g.kind, r); err != nil {
		return "", err
	}
	var repo struct {
		DefaultBranch string `json:"default_branch"`
		Empty         bool   `json:"empty"`
	}
	if err := g.call(ctx, r, http.MethodGet, "/repos/"+r.String(), nil, &repo); err != nil {
		return "", err
	}
	if repo.DefaultBranch == "" || repo.Empty {
		return "", fmt.Errorf("gitea %s: the repository is empty: no default branch: %w", r, errdefs.ErrNotFound)
	}
	return repo.DefaultBranch, nil
}

// giteaPull is the part of Gitea's pull request object we read.
type giteaPull struct {
	Number  int    `json:"number"`
	HTMLURL string `json:"html_url"`
	State   string `json:"state"`
	Head    struct {
		Ref  string `json:"ref"`
		Repo *struct {
			FullName string `json:"full_name"`
		} `json:"repo"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
}

func (p giteaPull) pr() PR { return PR{Number: p.Number, URL: p.HTMLURL, State: p.State} }

func (g *gitea) OpenOrUpdatePR(ctx context.Context, r Remote, req PRRequest) (PR, error) {
	if err := validRequest(g.kind, r, req); err != nil {
		return PR{}, err
	}
	labels := uniqueLabels(req.Labels)
	var notes []string
	req.Body, notes = fitBody(req.Body, otherMaxBody)
	pulls := "/repos/" + r.String() + "/pulls"
	return openOrUpdate(ctx, prSteps{
		head: req.Head, base: req.Base, notes: notes,
		find: func(ctx context.Context) (*PR, error) {
			// The list cannot filter by head branch: walk the open ones.
			var found *PR
			for page := 1; page <= giteaMaxPages; page++ {
				q := url.Values{"state": {"open"}, "page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(giteaPageSize)}}
				var list []giteaPull
				if err := g.call(ctx, r, http.MethodGet, pulls+"?"+q.Encode(), nil, &list); err != nil {
					return nil, err
				}
				for _, p := range list {
					// Only a PR from this repository's own branch: a fork's
					// branch of the same name is someone else's.
					if p.Head.Ref != req.Head || p.Head.Repo == nil || !strings.EqualFold(p.Head.Repo.FullName, r.String()) {
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
				if len(list) < giteaPageSize {
					break
				}
			}
			return found, nil
		},
		create: func(ctx context.Context) (PR, error) {
			var p giteaPull
			err := g.call(ctx, r, http.MethodPost, pulls, map[string]any{
				"head": req.Head, "base": req.Base, "title": req.Title, "body": req.Body,
			}, &p)
			return p.pr(), err
		},
		update: func(ctx context.Context, n int) (PR, error) {
			// No "labels" field: Gitea would replace the PR's labels with it.
			var p giteaPull
			err := g.call(ctx, r, http.MethodPatch, pulls+"/"+strconv.Itoa(n), map[string]any{
				"title": req.Title, "body": req.Body, "base": req.Base,
			}, &p)
			return p.pr(), err
		},
		addLabels: func(ctx context.Context, n int) []string {
			if len(labels) == 0 {
				return nil
			}
			ids, notes := g.labelIDs(ctx, r, labels)
			if len(ids) == 0 {
				return notes
			}
			path := "/repos/" + r.String() + "/issues/" + strconv.Itoa(n) + "/labels"
			if err := g.call(ctx, r, http.MethodPost, path, map[string]any{"labels": ids}, nil); err != nil {
				notes = append(notes, fmt.Sprintf("labels %q not set: %v", labels, err))
			}
			return notes
		},
	})
}

// giteaLabel is the part of Gitea's label object we read.
type giteaLabel struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// labelIDs resolves names to the ids of the repository's labels, or of its
// organisation's, creating the missing ones in the repository. What cannot
// be resolved or created becomes a note.
func (g *gitea) labelIDs(ctx context.Context, r Remote, names []string) ([]int64, []string) {
	known := map[string]int64{}
	var notes []string
	collect := func(path string) error {
		for page := 1; page <= giteaMaxPages; page++ {
			q := url.Values{"page": {strconv.Itoa(page)}, "limit": {strconv.Itoa(giteaPageSize)}}
			var list []giteaLabel
			if err := g.call(ctx, r, http.MethodGet, path+"?"+q.Encode(), nil, &list); err != nil {
				return err
			}
			for _, l := range list {
				if _, ok := known[l.Name]; !ok {
					known[l.Name] = l.ID
				}
			}
			if len(list) < giteaPageSize {
				return nil
			}
		}
		return nil
	}
	if err := collect("/repos/" + r.String() + "/labels"); err != nil {
		return nil, []string{fmt.Sprintf("labels %q not set: listing the repository's labels: %v", names, err)}
	}
	missing := false
	for _, n := range names {
		if _, ok := known[n]; !ok {
			missing = true
		}
	}
	if missing {
		// An owner that is a user, not an organisation, answers 404 here, and
		// a token without read:organization 403: then a label of that name
		// is made in the repository, which is what the token can do.
		err := collect("/orgs/" + url.PathEscape(r.Owner) + "/labels")
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnauthorized) {
			notes = append(notes, fmt.Sprintf("organisation labels not read: %v", err))
		}
	}
	var ids []int64
	for _, n := range names {
		if id, ok := known[n]; ok {
			ids = append(ids, id)
			continue
		}
		var l giteaLabel
		if err := g.call(ctx, r, http.MethodPost, "/repos/"+r.String()+"/labels", map[string]any{
			"name": n, "color": labelColor, "description": "added by agentbox",
		}, &l); err != nil {
			notes = append(notes, fmt.Sprintf("label %q does not exist and was not created: %v", n, err))
			continue
		}
		known[n] = l.ID
		ids = append(ids, l.ID)
	}
	return ids, notes
}
