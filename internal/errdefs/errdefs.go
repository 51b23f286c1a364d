// Package errdefs holds the error classes shared by every agentbox package.
//
// Packages wrap one of these sentinels with context naming the object
// ("workspace ws_123: %w") and the API layer turns the class into a status
// code in exactly one place. Callers test the class with errors.Is.
package errdefs

import (
	"errors"
	"fmt"
	"strings"
)

// The classes. Each maps to one API error code (see Code).
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrInvalid      = errors.New("invalid")
	ErrPolicyDenied = errors.New("denied by policy")
	ErrUnavailable  = errors.New("unavailable")
	ErrTooLarge     = errors.New("too large")
	ErrUnauthorized = errors.New("unauthorized")
)

// Code returns the stable API code of err's class, or "internal".
func Code(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrPolicyDenied):
		return "policy_denied"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrUnauthorized):
		return "unauthorized"
	}
	return "internal"
}

// FromCode is the inverse of Code, used by the client to rebuild the class
// of an error that crossed the API.
func FromCode(code string) error {
	switch code {
	case "not_found":
		return ErrNotFound
	case "conflict":
		return ErrConflict
	case "invalid":
		return ErrInvalid
	case "policy_denied":
		return ErrPolicyDenied
	case "unavailable":
		return ErrUnavailable
	case "too_large":
		return ErrTooLarge
	case "unauthorized":
		return ErrUnauthorized
	}
	return nil
}

// Invalid returns an ErrInvalid error with a formatted reason.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// NotFound returns an ErrNotFound error naming the object ("workspace ws_1").
func NotFound(kind, id string) error {
	return fmt.Errorf("%s %s %w", kind, id, ErrNotFound)
}

// Message is err's message as the API sends it: without the class word
// that wrapping appends ("workspace ws_1 not found" rather than "...: not
// found"), the code carries the class.
func Message(err error) string {
	msg := err.Error()
	for _, class := range []error{ErrNotFound, ErrInvalid, ErrConflict, ErrUnavailable, ErrTooLarge, ErrUnauthorized, ErrPolicyDenied} {
		msg = strings.TrimSuffix(msg, ": "+class.Error())
	}
	return msg
}
