package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
)

func fileMode(m uint64) os.FileMode { return os.FileMode(m) }

func (c *cli) eventsCmd() *cobra.Command {
	var f client.EventFilter
	var follow bool
	cmd := &cobra.Command{
		Use:   "events [--workspace WS] [--sandbox SB] [--repo REPO] [--type TYPE] [--follow]",
		Short: "Show the event log",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if follow {
				// A stream: one JSON object per line with --json. The events
				// already logged after --after come first, then each new one
				// as it is recorded, until interrupted.
				return cl.FollowEvents(cmd.Context(), f, func(e client.Event) error {
					if c.json {
						c.emitLine(e)
					} else {
						printEvent(c.stdout, e)
					}
					return nil
				})
			}
			ev, err := cl.Events(cmd.Context(), f)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"events": ev}, func(w io.Writer) {
				for _, e := range ev {
					printEvent(w, e)
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Workspace, "workspace", "", "only this workspace")
	fl.StringVar(&f.Repo, "repo", "", "only this repo (ID)")
	fl.StringVar(&f.Sandbox, "sandbox", "", "only this sandbox")
	fl.StringVar(&f.Type, "type", "", "only this event type")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many (default 1000; ignored by --follow)")
	fl.Int64Var(&f.After, "after", 0, "only events with a larger ID")
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
