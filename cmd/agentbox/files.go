package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
)

func (c *cli) filesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "files", Short: "Read and change a workspace's files (paths relative to its root)"}
	cmd.AddCommand(c.filesReadCmd(), c.filesWriteCmd(), c.filesLsCmd(), c.filesStatCmd(), c.filesRmCmd(),
		c.filesMkdirCmd(), c.filesMvCmd(), c.filesGrepCmd())
	return cmd
}

func (c *cli) filesReadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "read WS PATH",
		Short: "Print a file's content, raw",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if !c.json {
				_, err := cl.ReadFile(cmd.Context(), args[0], args[1], c.stdout)
				return err
			}
			var buf bytes.Buffer
			if _, err := cl.ReadFile(cmd.Context(), args[0], args[1], &buf); err != nil {
				return err
			}
			doc := map[string]any{"id": args[0], "path": args[1], "size": buf.Len()}
			if utf8.Valid(buf.Bytes()) {
				doc["encoding"], doc["content"] = "utf-8", buf.String()
			} else {
				doc["encoding"], doc["content"] = "base64", base64.StdEncoding.EncodeToString(buf.Bytes())
			}
			return c.emit(doc, nil)
		},
	}
}

func (c *cli) filesWriteCmd() *cobra.Command {
	var mode string
	var parents bool
	cmd := &cobra.Command{
		Use:   "write WS PATH < CONTENT",
		Short: "Write stdin to a file, atomically; durable when the command returns",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m uint64
			if mode != "" {
				var err error
				if m, err = strconv.ParseUint(mode, 8, 32); err != nil || m > 0o777 {
					return errdefs.Invalid("--mode %q is not an octal permission like 0644", mode)
				}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			fi, err := cl.WriteFile(cmd.Context(), args[0], args[1], c.stdin, fileMode(m), parents)
			if err != nil {
				return err
			}
			return c.emit(withID(args[0], fi), func(w io.Writer) { fmt.Fprintf(w, "wrote %s (%d bytes)\n", fi.Path, fi.Size) })
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "octal permissions (default 0644)")
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parent directories")
	return cmd
}

// withID adds the workspace ID to a file document so that every JSON
// object the CLI prints carries an id.
func withID(id string, fi client.FileInfo) map[string]any {
	return map[string]any{"id": id, "path": fi.Path, "name": fi.Name, "type": fi.Type, "size": fi.Size,
		"mode": fi.Mode, "mod_time": fi.ModTime, "link_target": fi.LinkTarget}
}

func (c *cli) filesLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls WS [PATH]",
		Short: "List a directory (symlinks shown, never followed)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "."
			if len(args) == 2 {
				p = args[1]
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			entries, err := cl.ListFiles(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "path": p, "entries": entries}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, e := range entries {
					name := e.Name
					switch e.Type {
					case "dir":
						name += "/"
					case "symlink":
						name += " -> " + e.LinkTarget
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\n", e.Mode, e.Size, name)
				}
				tw.Flush()
			})
		},
	}
}

func (c *cli) filesStatCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stat WS PATH",
		Short: "Describe a path (symlinks not followed)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			fi, err := cl.StatFile(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return c.emit(withID(args[0], fi), func(w io.Writer) {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d bytes\t%s\n", fi.Path, fi.Type, fi.Mode, fi.Size, fi.ModTime.Local().Format("2006-01-02 15:04:05"))
			})
		},
	}
}

func (c *cli) filesRmCmd() *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm WS PATH",
		Short: "Remove a file or directory",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveFile(cmd.Context(), args[0], args[1], recursive); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "path": args[1], "removed": true}, func(w io.Writer) { fmt.Fprintf(w, "removed %s\n", args[1]) })
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove a non-empty directory")
	return cmd
}

func (c *cli) filesMkdirCmd() *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir WS PATH",
		Short: "Make a directory",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			fi, err := cl.Mkdir(cmd.Context(), args[0], args[1], parents)
			if err != nil {
				return err
			}
			return c.emit(withID(args[0], fi), func(w io.Writer) { fmt.Fprintf(w, "made %s\n", fi.Path) })
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "make parents as needed")
	return cmd
}

func (c *cli) filesMvCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mv WS FROM TO",
		Short: "Rename a path",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := cl.Rename(cmd.Context(), args[0], args[1], args[2]); err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "from": args[1], "to": args[2]}, func(w io.Writer) { fmt.Fprintf(w, "renamed %s -> %s\n", args[1], args[2]) })
		},
	}
}

func (c *cli) filesGrepCmd() *cobra.Command {
	var req client.GrepRequest
	cmd := &cobra.Command{
		Use:   "grep WS PATTERN [PATH]",
		Short: "Search file contents (RE2 syntax, bounded)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Pattern = args[1]
			if len(args) == 3 {
				req.Path = args[2]
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.Grep(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return c.emit(map[string]any{"id": args[0], "matches": res.Matches, "files_scanned": res.FilesScanned, "truncated": res.Truncated}, func(w io.Writer) {
				for _, m := range res.Matches {
					fmt.Fprintf(w, "%s:%d:%s\n", m.Path, m.Line, m.Text)
				}
				if res.Truncated {
					fmt.Fprintln(c.stderr, "(results truncated)")
				}
			})
		},
	}
	cmd.Flags().BoolVarP(&req.IgnoreCase, "ignore-case", "i", false, "case-insensitive")
	cmd.Flags().IntVar(&req.MaxMatches, "max", 0, "stop after this many matches (default 1000)")
	return cmd
}
