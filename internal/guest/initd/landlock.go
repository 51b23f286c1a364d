package initd

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/guest"
)

// Landlock is the Landlock policy of the guest's commands. The ruleset
// itself is fixed (see landlock_linux.go); only these knobs vary.
type Landlock struct {
	// Mode says whether commands run under the ruleset.
	Mode guest.LandlockMode
	// ConnectTCP are the TCP ports commands may connect to (Landlock ABI
	// 4 and later); they may bind none.
	ConnectTCP []uint16
}

// ParsePorts parses a comma-separated list of TCP ports.
func ParsePorts(s string) ([]uint16, error) {
	var ports []uint16
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%w: TCP port %q", guest.ErrInvalid, f)
		}
		ports = append(ports, uint16(n))
	}
	slices.Sort(ports)
	return slices.Compact(ports), nil
}

// reaperArgs is how l travels on a reaper's command line.
func (l Landlock) reaperArgs() []string {
	if l.Mode == guest.LandlockOff {
		return nil
	}
	ports := make([]string, len(l.ConnectTCP))
	for i, p := range l.ConnectTCP {
		ports[i] = strconv.Itoa(int(p))
	}
	return []string{"landlock=" + l.Mode.String(), "tcp-connect=" + strings.Join(ports, ",")}
}

// parseReaperArgs reverses reaperArgs.
func parseReaperArgs(args []string) (Landlock, error) {
	var l Landlock
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "landlock":
			l.Mode, err = guest.ParseLandlockMode(v)
		case "tcp-connect":
			l.ConnectTCP, err = ParsePorts(v)
		default:
			err = fmt.Errorf("unknown reaper argument %q", a)
		}
		if err != nil {
			return Landlock{}, err
		}
	}
	return l, nil
}
