package envdfs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"syscall"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/internal/errdefs"
)

// The SDK turns these codes into its own errors: not_found into
// FileNotFoundError (filesystem calls), invalid_argument into
// InvalidArgumentError, unauthenticated into AuthenticationError,
// unavailable into a TimeoutError that says the sandbox is gone,
// already_exists into MakeDir's false. HTTP statuses on /files map the same
// way: 400, 401, 404, 502 and 507 (NotEnoughSpaceError).

// errClass names the few cases whose code depends on where the error
// arose, not only on its errdefs class.
type errClass int

const (
	// fromFiles: an error of a file operation.
	fromFiles errClass = iota
	// fromResolve: an error of the Resolver. An unknown sandbox is not a
	// missing file: E2B's proxy answers 502 for it, which the SDK reports
	// as a sandbox that is gone.
	fromResolve
)

// connectError turns err into the Connect error the SDK expects.
func connectError(err error, from errClass) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(connectCode(err, from), errors.New(errdefs.Message(err)))
}

func connectCode(err error, from errClass) connect.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case from == fromResolve && errors.Is(err, errdefs.ErrNotFound):
		return connect.CodeUnavailable
	case errors.Is(err, errdefs.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, errdefs.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrConflict):
		return connect.CodeAlreadyExists
	case errors.Is(err, errdefs.ErrUnauthorized):
		return connect.CodeUnauthenticated
	case errors.Is(err, errdefs.ErrPolicyDenied):
		return connect.CodePermissionDenied
	case errors.Is(err, errdefs.ErrUnavailable):
		return connect.CodeUnavailable
	case errors.Is(err, errdefs.ErrTooLarge):
		// Not resource_exhausted: the SDK reports that as a rate limit.
		return connect.CodeFailedPrecondition
	}
	return connect.CodeInternal
}

// httpStatus is the status of err on /files.
func httpStatus(err error, from errClass) int {
	switch {
	case from == fromResolve && errors.Is(err, errdefs.ErrNotFound):
		return http.StatusBadGateway
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, errdefs.ErrInvalid), errors.Is(err, errdefs.ErrConflict):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errdefs.ErrPolicyDenied):
		return http.StatusForbidden
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusBadGateway
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}

// envdError is envd's JSON error body.
type envdError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

func writeHTTPError(w http.ResponseWriter, err error, from errClass) {
	code := httpStatus(err, from)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(envdError{Message: errdefs.Message(err), Code: code})
}
