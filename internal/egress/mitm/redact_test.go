package mitm

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns b in reads of the given sizes (cycled).
type chunkReader struct {
	b     []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

func TestRedactor(t *testing.T) {
	reps := []replacement{
		{old: []byte("s3cret"), new: []byte("agentbox-secret-A-0")},
		{old: []byte("s3cretlonger"), new: []byte("agentbox-secret-B-0")},
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"s3cret", "agentbox-secret-A-0"},
		{"xs3crets3cretx", "xagentbox-secret-A-0agentbox-secret-A-0x"},
		{"s3cretlonger!", "agentbox-secret-B-0!"},
		{"s3cre", "s3cre"},
		{"ss3cret", "sagentbox-secret-A-0"},
		{"s3cs3cret", "s3cagentbox-secret-A-0"},
	} {
		for name, r := range map[string]func() io.Reader{
			"whole":    func() io.Reader { return strings.NewReader(tc.in) },
			"one byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(tc.in)) },
			"data err": func() io.Reader { return iotest.DataErrReader(strings.NewReader(tc.in)) },
		} {
			got, err := io.ReadAll(newRedactor(r(), reps))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("%s: redact(%q) = %q, want %q", name, tc.in, got, tc.want)
			}
		}
		if got := redactString(tc.in, reps); got != tc.want {
			t.Errorf("redactString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRedactorPassesErrors(t *testing.T) {
	r := newRedactor(io.MultiReader(strings.NewReader("abc s3c"), iotest.ErrReader(io.ErrUnexpectedEOF)),
		[]replacement{{old: []byte("s3cret"), new: []byte("P")}})
	got, err := io.ReadAll(r)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("err = %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if string(got) != "abc s3c" {
		t.Errorf("got %q, want the held-back tail flushed", got)
	}
}

// FuzzRedactor checks that, however the input is chunked, the streaming
// redactor gives the one-shot result, and that no value survives in it.
// The value is kept to bytes no placeholder holds (>= 0x80): otherwise a
// placeholder next to ordinary text can spell the value, which is no leak.
func FuzzRedactor(f *testing.F) {
	f.Add([]byte("hello world"), []byte("tok"), uint64(1), uint8(3))
	f.Add([]byte(""), []byte("x"), uint64(7), uint8(1))
	f.Add([]byte("aaaaaaaaaaaaaaa"), []byte("aa"), uint64(42), uint8(9))
	f.Fuzz(func(t *testing.T, text, value []byte, seed uint64, inserts uint8) {
		if len(value) == 0 || len(value) > 64 || len(text) > 1024 {
			return
		}
		v := make([]byte, len(value))
		for i, b := range value {
			v[i] = b | 0x80
		}
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		in := append([]byte(nil), text...)
		for range int(inserts % 16) {
			at := rng.IntN(len(in) + 1)
			in = append(in[:at], append(append([]byte(nil), v...), in[at:]...)...)
		}
		reps := []replacement{{old: v, new: []byte("agentbox-secret-FUZZ-00112233445566778899aabbccddeeff")}}
		want := []byte(redactString(string(in), reps))
		sizes := make([]int, 1+rng.IntN(8))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(len(v)+3)
		}
		got, err := io.ReadAll(newRedactor(&chunkReader{b: in, sizes: sizes}, reps))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunked %v: got %q, want %q", sizes, got, want)
		}
		if bytes.Contains(got, v) {
			t.Fatalf("output %q holds the value %q", got, v)
		}
		if bytes.Equal(in, text) && !bytes.Contains(text, v) && !bytes.Equal(got, text) {
			t.Fatalf("input without the value changed: %q -> %q", text, got)
		}
	})
}
