package bench

import (
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace, from /proc/self/mountinfo.
func mountsUnder(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMountinfo decodes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// detach lazily unmounts path.
func detach(path string) { unix.Unmount(path, unix.MNT_DETACH) }

// quiesce writes dirty data back to disk.
func quiesce() { unix.Sync() }
