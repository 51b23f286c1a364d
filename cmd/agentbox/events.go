package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func fileMode(m uint64) os.FileMode { return os.FileMode(m) }

func (c *cli) eventsCmd() *cobra.Command {
	var f client.EventFilter
	var follow bool
	cmd := &cobra.Command{
		Use:   "events [--workspace WS] [--repo REPO] [--type TYPE] [--follow]",
		Short: "Show the event log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ev, err := cl.Events(cmd.Context(), f)
			if err != nil {
				return err
			}
			if !follow {
				return c.emit(map[string]any{"events": ev}, func(w io.Writer) {
					for _, e := range ev {
						printEvent(w, e)
					}
				})
			}
			// --follow streams: one JSON object per line with --json.
			for {
				for _, e := range ev {
					if c.json {
						c.emitLine(e)
					} else {
						printEvent(c.stdout, e)
					}
					f.After = e.ID
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(500 * time.Millisecond):
				}
				if ev, err = cl.Events(cmd.Context(), f); err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Workspace, "workspace", "", "only this workspace")
	fl.StringVar(&f.Repo, "repo", "", "only this repo (ID)")
	fl.StringVar(&f.Sandbox, "sandbox", "", "only this sandbox")
	fl.StringVar(&f.Type, "type", "", "only this event type")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many (default 1000)")
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	return cmd
}

func printEvent(w io.Writer, e client.Event) {
	obj := e.WorkspaceID
	if obj == "" {
		obj = e.RepoID
	}
	if e.SandboxID != "" {
		obj += " " + e.SandboxID
	}
	fmt.Fprintf(w, "%d\t%s\t%-8s\t%-22s\t%s\t%s\n", e.ID, e.Time.Local().Format("2006-01-02 15:04:05.000"), e.Actor, e.Type, obj, e.Detail)
}
