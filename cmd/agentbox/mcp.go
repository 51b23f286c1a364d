package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/internal/api"
	"github.com/agentbox/agentbox/internal/mcpserver"
)

func (c *cli) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve agentbox's tools to an MCP client over stdio (claude mcp add agentbox -- agentbox mcp)",
		Long: `Serve agentbox's tools (workspaces, commands, files, diff and commit) to an MCP client
over stdio: newline-delimited JSON-RPC on stdin and stdout, nothing else on stdout. Each
tool call is a request to the daemon (found as every command finds it: --host,
$AGENTBOX_HOST, $AGENTBOX_DATA). Directories named by create_workspace's from_dir are read
here, with this process's permissions, relative to its working directory. The daemon
also serves the same tools as streamable HTTP at /mcp.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			s := mcpserver.New(mcpserver.ClientBackend(cl), mcpserver.Options{Version: api.Version})
			return s.ServeStdio(cmd.Context(), io.NopCloser(c.stdin), nopWriteCloser{c.stdout})
		},
	}
}

// nopWriteCloser gives the CLI's stdout the Close the transport wants;
// closing it is left to the process's exit.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
