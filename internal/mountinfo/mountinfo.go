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

// Mount is one line of a mount table.
type Mount struct {
	// Point is the mount point, decoded.
	Point string
	// Options are the mount's own options (rw, nosuid, nodev...).
	Options []string
	// Propagation are the optional fields: shared:N, master:N,
	// propagate_from:N, unbindable; none for a private mount.
	Propagation []string
}

// At returns the mounts at mount point mp in the mount table file
// (/proc/self/mountinfo, /proc/PID/mountinfo for another process's mount
// namespace, as that process sees its paths), in the table's order: the
// topmost last.
func At(file, mp string) ([]Mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mp = filepath.Clean(mp)
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || Unescape(fields[4]) != mp {
			continue
		}
		m := Mount{Point: mp, Options: strings.Split(fields[5], ",")}
		for _, o := range fields[6:] {
			if o == "-" {
				break
			}
			m.Propagation = append(m.Propagation, o)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
