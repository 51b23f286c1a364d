// Package mountinfo reads this process's mount table from
// /proc/self/mountinfo. It is the one parser of that file in agentbox:
// workspaces, image builds and tests all ask it which mounts exist.
package mountinfo

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Points returns every mount point in this mount namespace, decoded.
func Points() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out = append(out, Unescape(fields[4]))
		}
	}
	return out, sc.Err()
}

// Under returns the mount points at or below dir, deepest first (the order
// to unmount them in).
func Under(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	all, err := Points()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mp := range all {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// IsMountPoint reports whether path is a mount point.
func IsMountPoint(path string) (bool, error) {
	path = filepath.Clean(path)
	all, err := Points()
	if err != nil {
		return false, err
	}
	for _, mp := range all {
		if mp == path {
			return true, nil
		}
	}
	return false, nil
}

// Unescape decodes the octal escapes (\040 for a space) of mountinfo.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
