package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errdefs"
	"github.com/agentbox/agentbox/internal/fileapi"
)

func (c *cli) filesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "files", Short: "Read and change a workspace's files (paths relative to its root)"}
	cmd.AddCommand(c.filesReadCmd(), c.filesWriteCmd(), c.filesEditCmd(), c.filesLsCmd(), c.filesFindCmd(), c.filesStatCmd(), c.filesRmCmd(),
		c.filesMkdirCmd(), c.filesMvCmd(), c.filesGrepCmd())
	return cmd
}

func (c *cli) filesReadCmd() *cobra.Command {
	var lines, byteRange string
	cmd := &cobra.Command{
		Use:   "read WS PATH [--lines FIRST:LAST | --bytes OFFSET:LENGTH]",
		Short: "Print a file's content, raw, or a range of its lines or bytes",
		Long: `Print a file's content, raw, or a range of it: --lines 40:80 (1-based,
inclusive; 40: to the end, :80 from the start, 40 alone), --bytes 100:50
(50 bytes from offset 100; 100: to the end). A range may be read from a
file larger than the daemon's read limit. With --json the document carries
the content ("encoding" utf-8 or base64) and, for --lines, the lines
numbered: {"lines": [{"line": 40, "text": "..."}, ...]}.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r client.Range
			var err error
			switch {
			case lines != "" && byteRange != "":
				return errdefs.Invalid("give --lines or --bytes, not both")
			case lines != "":
				if r.FirstLine, r.LastLine, err = fileapi.ParseLines(lines); err != nil {
					return err
				}
			case byteRange != "":
				if r.Offset, r.Length, err = fileapi.ParseBytes(byteRange); err != nil {
					return err
				}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if !c.json {
				_, err := cl.ReadFileRange(cmd.Context(), args[0], args[1], r, c.stdout)
				return err
			}
			fc, err := cl.ReadFileContent(cmd.Context(), args[0], args[1], r)
			if err != nil {
				return err
			}
			return c.emit(struct {
				ID string `json:"id"`
				client.FileContent
			}{args[0], fc}, nil)
		},
	}
	cmd.Flags().StringVar(&lines, "lines", "", "only lines FIRST:LAST (1-based, inclusive)")
	cmd.Flags().StringVar(&byteRange, "bytes", "", "only LENGTH bytes from OFFSET, as OFFSET:LENGTH")
	return cmd
}

func (c *cli) filesWriteCmd() *cobra.Command {
	var mode string
	var noParents bool
	cmd := &cobra.Command{
		Use:   "write WS PATH < CONTENT",
		Short: "Write stdin to a file, atomically, making missing directories; durable when the command returns",
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
			fi, err := cl.WriteFile(cmd.Context(), args[0], args[1], c.stdin, fileMode(m), !noParents)
			if err != nil {
				return err
			}
			return c.emit(withID(args[0], fi), func(w io.Writer) { fmt.Fprintf(w, "wrote %s (%d bytes)\n", fi.Path, fi.Size) })
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "octal permissions (default 0644)")
	cmd.Flags().BoolVar(&noParents, "no-parents", false, "fail if the parent directory is missing instead of making it")
	// -p/--parents was needed before parents were made by default; it is
	// still accepted.
	cmd.Flags().BoolP("parents", "p", true, "make missing parent directories (the default)")
	cmd.Flags().MarkHidden("parents")
	return cmd
}

func (c *cli) filesEditCmd() *cobra.Command {
	var req client.EditRequest
	cmd := &cobra.Command{
		Use:   "edit WS PATH --old TEXT --new TEXT [--all]",
		Short: "Replace exact text in a file (it must occur exactly once, unless --all); atomic and durable",
		Long: `Replace exact text in a file: --old must occur in it exactly as given
(whitespace and line ends included) and exactly once, unless --all replaces
every occurrence. When it does not occur, the error quotes the lines that
come closest; when it occurs more than once, it names their lines. The file
is rewritten atomically and durably, keeping its mode.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("old") {
				return errdefs.Invalid("--old is required")
			}
			if !cmd.Flags().Changed("new") {
				return errdefs.Invalid("--new is required (--new '' deletes the text)")
			}
			req.Path = args[1]
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.EditFile(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return c.emit(struct {
				ID string `json:"id"`
				client.EditResult
			}{args[0], res}, func(w io.Writer) {
				fmt.Fprintf(w, "edited %s: %d replacement(s) at line(s) %s\n", res.Path, res.Replacements, joinInts(res.Lines))
			})
		},
	}
	cmd.Flags().StringVar(&req.Old, "old", "", "the exact text to replace")
	cmd.Flags().StringVar(&req.New, "new", "", "the text to put in its place")
	cmd.Flags().BoolVar(&req.All, "all", false, "replace every occurrence")
	return cmd
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (c *cli) filesFindCmd() *cobra.Command {
	var req client.FindRequest
	cmd := &cobra.Command{
		Use:   "find WS GLOB [PATH]",
		Short: "Find paths by glob (*.go finds by name at any depth; src/**/*_test.go matches paths)",
		Long: `Find paths by glob, under PATH (default the workspace root). "*", "?" and
"[...]" match within one path component and "**" any number of them. A glob
without "/" matches entry names at any depth ("*.go"); one with "/" matches
whole paths relative to PATH ("src/**/*_test.go"). Symlinks are matched, not
followed; .git directories are skipped unless --include-git.`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Pattern = args[1]
			if len(args) == 3 {
				req.Path = args[2]
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			res, err := cl.FindFiles(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			return c.emit(struct {
				ID string `json:"id"`
				client.FindResult
			}{args[0], res}, func(w io.Writer) {
				for _, m := range res.Matches {
					name := m.Path
					if m.Type == "dir" {
						name += "/"
					}
					fmt.Fprintln(w, name)
				}
				if res.Truncated {
					fmt.Fprintln(c.stderr, "(results truncated)")
				}
			})
		},
	}
	cmd.Flags().StringVar(&req.Type, "type", "", "only entries of this type: file, dir, symlink or other")
	cmd.Flags().IntVar(&req.MaxResults, "max", 0, "stop after this many matches (default 1000)")
	cmd.Flags().BoolVar(&req.IncludeGit, "include-git", false, "search .git directories too")
	return cmd
}

// withID adds the workspace ID to a file document so that every JSON
// object the CLI prints carries an id.
func withID(id string, fi client.FileInfo) map[string]any {
	return map[string]any{"id": id, "path": fi.Path, "name": fi.Name, "type": fi.Type, "size": fi.Size,
		"mode": fi.Mode, "mod_time": fi.ModTime, "link_target": fi.LinkTarget}
}

func (c *cli) filesLsCmd() *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:   "ls WS [PATH] [--depth N]",
		Short: "List a directory, or with --depth N the tree below it (symlinks shown, never followed)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "."
			if len(args) == 2 {
				p = args[1]
			}
			if depth < 1 || depth > fileapi.MaxTreeDepth {
				return errdefs.Invalid("--depth %d is not between 1 and %d", depth, fileapi.MaxTreeDepth)
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			list, err := cl.ListTree(cmd.Context(), args[0], p, depth)
			if err != nil {
				return err
			}
			return c.emit(struct {
				ID string `json:"id"`
				client.FileList
			}{args[0], list}, func(w io.Writer) {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, e := range list.Entries {
					name := e.Name
					if depth > 1 {
						name = e.Path
					}
					switch e.Type {
					case "dir":
						name += "/"
					case "symlink":
						name += " -> " + e.LinkTarget
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\n", e.Mode, e.Size, name)
				}
				tw.Flush()
				if list.Truncated {
					fmt.Fprintln(c.stderr, "(listing truncated)")
				}
			})
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "list this many levels (1: the directory's own entries)")
	return cmd
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
