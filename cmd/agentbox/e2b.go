package main

import (
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (c *cli) e2bCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "e2b", Short: "The E2B-compatible endpoint (agentbox serve --e2b-listen)"}
	cmd.AddCommand(c.e2bEnvCmd())
	return cmd
}

// e2bEnv is what an E2B client needs to reach the daemon's E2B endpoint.
type e2bEnv struct {
	APIURL     string `json:"E2B_API_URL"`
	SandboxURL string `json:"E2B_SANDBOX_URL"`
	APIKey     string `json:"E2B_API_KEY"`
}

func (c *cli) e2bEnvCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for the daemon's E2B endpoint (from its configuration)",
		Long: "Print the three variables an E2B SDK needs to use this daemon instead of E2B's cloud, as KEY=VALUE lines\n" +
			"(or one JSON object with --json). They come from the configuration the daemon reads: e2b_listen\n" +
			"($AGENTBOX_E2B_LISTEN) and token ($AGENTBOX_TOKEN), which is the API key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(file)
			if err != nil {
				return err
			}
			env, err := e2bEnvOf(cfg)
			if err != nil {
				return err
			}
			return c.emit(env, func(w io.Writer) {
				fmt.Fprintf(w, "E2B_API_URL=%s\nE2B_SANDBOX_URL=%s\nE2B_API_KEY=%s\n", env.APIURL, env.SandboxURL, env.APIKey)
			})
		},
	}
	cmd.Flags().StringVar(&file, "config", "", "the daemon's YAML config file (default $AGENTBOX_CONFIG)")
	return cmd
}

// e2bEnvOf derives the variables from the configuration: both URLs are
// the e2b_listen address (a wildcard host is reached on loopback).
func e2bEnvOf(cfg config.Config) (e2bEnv, error) {
	hostport, ok := strings.CutPrefix(cfg.E2BListen, "tcp://")
	if !ok {
		return e2bEnv{}, errdefs.Invalid("e2b env: the daemon serves no E2B endpoint: set e2b_listen (or $AGENTBOX_E2B_LISTEN, or run agentbox serve --e2b-listen tcp://HOST:PORT with the same value here)")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port == "" || port == "0" {
		return e2bEnv{}, errdefs.Invalid("e2b env: e2b_listen %q is not tcp://HOST:PORT with a fixed port", cfg.E2BListen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	if cfg.Token == "" {
		return e2bEnv{}, errdefs.Invalid("e2b env: no token (token or $AGENTBOX_TOKEN): it is the E2B API key")
	}
	u := "http://" + net.JoinHostPort(host, port)
	return e2bEnv{APIURL: u, SandboxURL: u, APIKey: cfg.Token}, nil
}
