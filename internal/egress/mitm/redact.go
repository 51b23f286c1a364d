package mitm

import (
	"bytes"
	"io"
	"slices"
)

// replacement is one value to be written over, and what goes in its place.
type replacement struct {
	old, new []byte
}

// redactor is a reader that replaces every occurrence of each old with its
// new in what it reads from src, including occurrences split across reads:
// it holds back a tail that could be the start of an old until the next
// read settles it. Matching is leftmost first, the longest old winning at
// one position, so its output is the same however src is chunked.
type redactor struct {
	src io.Reader
	// reps are sorted longest old first.
	reps []replacement
	// in is read but not yet scanned (a possible partial match).
	in []byte
	// out is scanned and ready to return.
	out []byte
	// buf is the read buffer.
	buf []byte
	// err is src's error, returned once in and out are drained.
	err error
}

// sortReplacements drops empty olds and sorts the rest longest first, the
// order the redactor needs.
func sortReplacements(reps []replacement) []replacement {
	reps = slices.DeleteFunc(slices.Clone(reps), func(r replacement) bool { return len(r.old) == 0 })
	slices.SortStableFunc(reps, func(a, b replacement) int { return len(b.old) - len(a.old) })
	return reps
}

func newRedactor(src io.Reader, reps []replacement) *redactor {
	return &redactor{src: src, reps: sortReplacements(reps), buf: make([]byte, 32<<10)}
}

func (r *redactor) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			if len(r.in) > 0 {
				r.scan(true)
				continue
			}
			return 0, r.err
		}
		n, err := r.src.Read(r.buf)
		r.in = append(r.in, r.buf[:n]...)
		r.err = err
		r.scan(err != nil)
		if n == 0 && err == nil {
			// Let the caller see the empty read rather than spin here.
			return 0, nil
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	if len(r.out) == 0 {
		r.out = r.out[:0:0]
	}
	return n, nil
}

// scan moves r.in to r.out, replacing as it goes. Unless final, it stops
// at the first position where what is left is a proper prefix of an old.
func (r *redactor) scan(final bool) {
	in := r.in
	i := 0
	start := 0 // start of the unreplaced run not yet copied to out
outer:
	for i < len(in) {
		rest := in[i:]
		// Longest first: a longer old that may still match once more
		// arrives holds the scan before a shorter one is taken.
		for _, rep := range r.reps {
			if bytes.HasPrefix(rest, rep.old) {
				r.out = append(r.out, in[start:i]...)
				r.out = append(r.out, rep.new...)
				i += len(rep.old)
				start = i
				continue outer
			}
			if !final && len(rest) < len(rep.old) && bytes.HasPrefix(rep.old, rest) {
				break outer
			}
		}
		i++
	}
	r.out = append(r.out, in[start:i]...)
	r.in = append(r.in[:0], in[i:]...)
}

// redactString applies reps to s with the redactor's matching rule.
func redactString(s string, reps []replacement) string {
	if len(reps) == 0 {
		return s
	}
	r := &redactor{reps: sortReplacements(reps), in: []byte(s)}
	r.scan(true)
	return string(r.out)
}
