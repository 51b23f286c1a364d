// Package llm holds the agent loop's model providers over HTTP: OpenAI
// Chat Completions (and every server that speaks it) and Anthropic
// Messages, each with tool calling, behind solve.Provider. It is apart
// from package solve so that the loop itself holds no HTTP client; the
// daemon opens providers here with keys from its secret store.
package llm

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/solve"
)

// Options configure a provider.
type Options struct {
	// APIKey authenticates to the API.
	APIKey string
	// BaseURL overrides the API's address (a local OpenAI-compatible
	// server, a test server).
	BaseURL string
	// HTTPClient, if set, carries the requests.
	HTTPClient *http.Client
	// MaxRetries is how often a 429 or 5xx is retried, with backoff
	// (default 3).
	MaxRetries int
	// MaxTokens bounds each reply (default 4096).
	MaxTokens int64
	// Timeout bounds each request (default 5m).
	Timeout time.Duration
	// Prices, if set, override the built-in prices, by model.
	Prices map[string]Price
	// Stream asks for the reply as server-sent events, assembled here:
	// a long reply then never waits on one idle response.
	Stream bool
}

func (o Options) withDefaults() Options {
	if o.MaxRetries == 0 {
		o.MaxRetries = 3
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = 4096
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	return o
}

// Price is what a model charges, in USD per million tokens.
type Price struct {
	Input, Output float64
}

// prices are list prices of a few models, USD per million tokens (as
// published in 2025); a model not listed costs 0 here, and the token
// counts still bound it.
var prices = map[string]Price{
	"gpt-4o":            {2.50, 10},
	"gpt-4o-mini":       {0.15, 0.60},
	"gpt-4.1":           {2, 8},
	"gpt-4.1-mini":      {0.40, 1.60},
	"claude-sonnet-4-5": {3, 15},
	"claude-haiku-4-5":  {1, 5},
	"claude-opus-4-1":   {15, 75},
}

// cost is the price of a call to model.
func (o Options) cost(model string, in, out int) float64 {
	p, ok := o.Prices[model]
	if !ok {
		p, ok = prices[model]
	}
	if !ok {
		// A dated model name costs what its family does.
		for name, q := range prices {
			if strings.HasPrefix(model, name+"-") {
				p = q
			}
		}
	}
	return (float64(in)*p.Input + float64(out)*p.Output) / 1e6
}

// countingTransport counts the HTTP requests a call makes, retries
// included.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

// counted returns a copy of c whose requests add to n.
func counted(c *http.Client, n *atomic.Int64) *http.Client {
	cp := *c
	next := cp.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	cp.Transport = countingTransport{next: next, n: n}
	return &cp
}

// Secrets reads the daemon's secret store (secrets.Box).
type Secrets interface {
	Reveal(ctx context.Context, name string) ([]byte, error)
}

// Open returns a solve.ProviderFunc that opens openai and anthropic
// providers, their keys from the secret store (OPENAI_API_KEY,
// ANTHROPIC_API_KEY) or else the daemon's own environment, never a
// sandbox's. OPENAI_BASE_URL and ANTHROPIC_BASE_URL (secret or
// environment) point them elsewhere, e.g. a local server.
func Open(box Secrets) solve.ProviderFunc {
	lookup := func(ctx context.Context, name string) string {
		if box != nil {
			if v, err := box.Reveal(ctx, name); err == nil && len(v) > 0 {
				return strings.TrimSpace(string(v))
			}
		}
		return os.Getenv(name)
	}
	return func(ctx context.Context, provider, model string) (solve.Provider, error) {
		switch provider {
		case "openai":
			key, base := lookup(ctx, "OPENAI_API_KEY"), lookup(ctx, "OPENAI_BASE_URL")
			if key == "" && base == "" {
				return nil, fmt.Errorf("no OPENAI_API_KEY in the secret store or the daemon's environment (agentbox secret set OPENAI_API_KEY)")
			}
			return NewOpenAI(Options{APIKey: key, BaseURL: base, Stream: true}), nil
		case "anthropic":
			key, base := lookup(ctx, "ANTHROPIC_API_KEY"), lookup(ctx, "ANTHROPIC_BASE_URL")
			if key == "" {
				return nil, fmt.Errorf("no ANTHROPIC_API_KEY in the secret store or the daemon's environment (agentbox secret set ANTHROPIC_API_KEY)")
			}
			return NewAnthropic(Options{APIKey: key, BaseURL: base, Stream: true}), nil
		}
		return nil, fmt.Errorf("unknown provider %q", provider)
	}
}
