package policy

import (
	"math/big"

	"github.com/agentbox/agentbox/internal/apitypes"
)

// ByteSize is a number of bytes, written in documents as a number or as a
// string with a binary unit: "512M", "1.5G", "100k", "2GiB", "1024".
// Zero means "not set". It is the API's own type (package apitypes), so
// that a size reads the same in a policy and in any request.
type ByteSize = apitypes.ByteSize

// Duration is a length of time, written in documents as a Go duration
// string ("30s", "2h", "1h30m") or a number of seconds. Zero means "not
// set". Convert with time.Duration(d).
type Duration = apitypes.Duration

// ParseByteSize parses the string form ("512M", "1.5G", "1024").
func ParseByteSize(s string) (ByteSize, error) { return apitypes.ParseByteSize(s) }

func decodeByteSize(data []byte) (ByteSize, string) { return apitypes.DecodeByteSize(data) }

func decodeDuration(data []byte) (Duration, string) { return apitypes.DecodeDuration(data) }

func decodeNumber(data []byte, want string) (*big.Rat, string) {
	return apitypes.DecodeNumber(data, want)
}
