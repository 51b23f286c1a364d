package guest

import (
	"fmt"
	"strings"
)

// Landlock. The guest can run every command under a Landlock ruleset
// (see package initd): the root file system read-only, /workspace, /tmp,
// /dev/shm, /dev/pts and a few devices writable, no TCP bind, TCP connect
// only to the ports it is given, abstract unix sockets and signals scoped
// to the command's own processes. A backend asks for it with the guest
// argument "--landlock=MODE" or the guest environment variable LandlockEnv;
// the guest says in its hello what it enforces (GuestInfo.Landlock).

const (
	// LandlockEnv sets the guest's Landlock mode (see ParseLandlockMode);
	// the guest argument --landlock takes precedence.
	LandlockEnv = "AGENTBOX_GUEST_LANDLOCK"
	// LandlockConnectEnv lists the TCP ports commands may connect to,
	// comma-separated; the guest argument --landlock-tcp-connect takes
	// precedence. Empty: none.
	LandlockConnectEnv = "AGENTBOX_GUEST_LANDLOCK_TCP_CONNECT"
)

// LandlockMode says whether the guest's commands run under Landlock.
type LandlockMode uint8

// The modes.
const (
	// LandlockOff applies no ruleset.
	LandlockOff LandlockMode = iota
	// LandlockBestEffort applies what the kernel supports and runs
	// commands anyway where Landlock is missing, saying so in the hello.
	LandlockBestEffort
	// LandlockRequired refuses every command when the guest cannot
	// enforce a ruleset.
	LandlockRequired

	landlockModeEnd
)

func (m LandlockMode) String() string {
	switch m {
	case LandlockOff:
		return "off"
	case LandlockBestEffort:
		return "best-effort"
	case LandlockRequired:
		return "required"
	}
	return fmt.Sprintf("landlock-mode-%d", uint8(m))
}

// ParseLandlockMode parses "off" (or "", "false", "0"), "best-effort" (or
// "true", "1", "on") and "required".
func ParseLandlockMode(s string) (LandlockMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off", "false", "0", "no":
		return LandlockOff, nil
	case "best-effort", "besteffort", "true", "1", "on", "yes":
		return LandlockBestEffort, nil
	case "required", "require":
		return LandlockRequired, nil
	}
	return 0, fmt.Errorf("%w: landlock mode %q: want off, best-effort or required", ErrInvalid, s)
}

// LandlockStatus is what the guest enforces on its commands.
type LandlockStatus struct {
	// Mode is what the guest was asked for.
	Mode LandlockMode
	// ABI is the kernel's Landlock ABI version, 0 when Landlock is
	// unavailable (or the guest did not look: Mode off).
	ABI int
	// Enforced says every command runs under a Landlock ruleset.
	Enforced bool
	// Detail says what the ruleset restricts, or why there is none.
	Detail string
}

func (s LandlockStatus) String() string {
	switch {
	case s.Mode == LandlockOff:
		return "off"
	case s.Enforced:
		return fmt.Sprintf("%s: enforced, %s", s.Mode, s.Detail)
	case s.Mode == LandlockRequired:
		return fmt.Sprintf("%s: UNAVAILABLE, commands are refused: %s", s.Mode, s.Detail)
	}
	return fmt.Sprintf("%s: not enforced: %s", s.Mode, s.Detail)
}
