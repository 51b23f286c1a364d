package mcpserver

import (
	"archive/tar"
	"bytes"
	"fmt"
	"sort"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// tarFiles packs create_workspace's files (path -> content) as the tar
// stream of an upload. The names are not checked here: the daemon's
// unpacker refuses what /v1 refuses (absolute names, "..", .git, ...),
// with the same errors.
func tarFiles(files map[string]string) ([]byte, error) {
	if len(files) == 0 {
		return nil, errdefs.Invalid("create_workspace: files is empty (use empty: true for a scratch workspace)")
	}
	if len(files) > MaxInlineFiles {
		return nil, fmt.Errorf("create_workspace: %d files, over the %d a call carries (upload a directory instead): %w", len(files), MaxInlineFiles, errdefs.ErrTooLarge)
	}
	total := 0
	names := make([]string, 0, len(files))
	for name, content := range files {
		total += len(content)
		names = append(names, name)
	}
	if total > MaxInlineBytes {
		return nil, fmt.Errorf("create_workspace: files of %d bytes in all, over the %d a call carries: %w", total, MaxInlineBytes, errdefs.ErrTooLarge)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		content := files[name]
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content)), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, errdefs.Invalid("create_workspace: file %q: %v", name, err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
