package apitypes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ByteSize is a number of bytes, written in documents as a number or as a
// string with a binary unit: "512M", "1.5G", "100k", "2GiB", "1024".
// Zero means "not set".
type ByteSize int64

// Binary units, largest first (the order String tries them in).
var byteUnits = []struct {
	suffix string
	size   int64
}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}

// byteSizeRE is a decimal number and an optional unit: K, M, G or T,
// then an optional "i", then an optional "B"; "B" may also stand alone.
var byteSizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)(?:([kmgtKMGT])[iI]?)?[bB]?$`)

// String is the canonical form: the largest unit that divides the size
// exactly ("8G", "1536M"), or plain bytes.
func (b ByteSize) String() string {
	for _, u := range byteUnits {
		if b != 0 && int64(b)%u.size == 0 {
			return strconv.FormatInt(int64(b)/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// MarshalJSON writes the canonical string form.
func (b ByteSize) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads a number of bytes or a string with a unit.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	v, reason := DecodeByteSize(data)
	if reason != "" {
		return fmt.Errorf("size %s: %s", data, reason)
	}
	*b = v
	return nil
}

// ParseByteSize parses the string form ("512M", "1.5G", "1024").
func ParseByteSize(s string) (ByteSize, error) {
	v, reason := parseByteSize(s)
	if reason != "" {
		return 0, fmt.Errorf("size %s: %s", quote(s), reason)
	}
	return v, nil
}

const byteSizeWant = `want a number of bytes or a number with a unit K, M, G or T, as in "512M" or "1.5G"`

// DecodeByteSize reads a size from JSON (a number of bytes or a string
// with a unit), or says why it cannot: a reason that reads after the
// field's name ("limits.memory: ...").
func DecodeByteSize(data []byte) (ByteSize, string) {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		return parseByteSize(s)
	}
	n, reason := DecodeNumber(data, byteSizeWant)
	if reason != "" {
		return 0, reason
	}
	return ratToByteSize(n)
}

func parseByteSize(s string) (ByteSize, string) {
	if len(s) > maxNumberText {
		return 0, "out of range"
	}
	m := byteSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, byteSizeWant
	}
	n, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return 0, byteSizeWant
	}
	if m[2] != "" {
		for _, u := range byteUnits {
			if strings.EqualFold(m[2], u.suffix) {
				n.Mul(n, new(big.Rat).SetInt64(u.size))
			}
		}
	}
	return ratToByteSize(n)
}

// ratToByteSize rounds to the nearest byte ("1.1G" is not a whole number
// of bytes, and nobody means the fraction).
func ratToByteSize(n *big.Rat) (ByteSize, string) {
	if n.Sign() < 0 {
		return 0, "a size cannot be negative"
	}
	v, ok := roundRat(n)
	if !ok {
		return 0, "too large"
	}
	return ByteSize(v), ""
}

// Duration is a length of time, written in documents as a Go duration
// string ("30s", "2h", "1h30m") or a number of seconds. Zero means "not
// set". Convert with time.Duration(d).
type Duration time.Duration

// String is the canonical form: Go's, without zero minutes and seconds at
// the end ("2h" rather than "2h0m0s").
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalJSON writes the canonical string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads "30s" or a number of seconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	v, reason := DecodeDuration(data)
	if reason != "" {
		return fmt.Errorf("duration %s: %s", data, reason)
	}
	*d = v
	return nil
}

const durationWant = `want a duration like "30s", "90m" or "2h" (units ns, us, ms, s, m, h) or a number of seconds`

// DecodeDuration reads a duration from JSON (a Go duration string or a
// number of seconds), or says why it cannot.
func DecodeDuration(data []byte) (Duration, string) {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, durationWant
		}
		if v < 0 {
			return 0, "a duration cannot be negative"
		}
		return Duration(v), ""
	}
	n, reason := DecodeNumber(data, durationWant)
	if reason != "" {
		return 0, reason
	}
	if n.Sign() < 0 {
		return 0, "a duration cannot be negative"
	}
	v, ok := roundRat(n.Mul(n, big.NewRat(int64(time.Second), 1)))
	if !ok {
		return 0, "too long"
	}
	return Duration(v), ""
}

// maxNumberText is more digits than any int64, fraction or exponent
// needs.
const maxNumberText = 48

// DecodeNumber reads a JSON number exactly (no float rounding), or says
// what was wanted instead.
func DecodeNumber(data []byte, want string) (*big.Rat, string) {
	var num json.Number
	if err := json.Unmarshal(data, &num); err != nil {
		return nil, fmt.Sprintf("%s, not %s", want, JSONKind(data))
	}
	// Exponents and digits far beyond int64 would make big.Rat allocate
	// without end.
	if len(num) > maxNumberText {
		return nil, "out of range"
	}
	if i := strings.IndexAny(string(num), "eE"); i >= 0 {
		if exp, err := strconv.Atoi(string(num[i+1:])); err != nil || exp > 30 || exp < -30 {
			return nil, "out of range"
		}
	}
	n, ok := new(big.Rat).SetString(string(num))
	if !ok {
		return nil, want
	}
	return n, ""
}

// roundRat rounds a non-negative n to the nearest integer, if it fits in
// an int64.
func roundRat(n *big.Rat) (int64, bool) {
	half := new(big.Rat).Add(n, big.NewRat(1, 2))
	i := new(big.Int).Quo(half.Num(), half.Denom())
	if !i.IsInt64() || i.Int64() == math.MinInt64 {
		return 0, false
	}
	return i.Int64(), true
}

// JSONKind names the kind of a JSON value for "want X, not Y" messages.
func JSONKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// quote quotes s for an error message, cut short so that a hostile
// megabyte-long value does not become a megabyte-long error.
func quote(s string) string {
	const max = 80
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
