package manager

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stream is the byte at each offset of the test streams: a reader can
// tell which offset a byte came from.
func stream(from, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte((from + i) % 251)
	}
	return b
}

func TestRing(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		writes []int // sizes of successive writes
		off    int64
		max    int
		// want: where the data starts and how long it is
		start int64
		n     int
	}{
		{"empty", 8, nil, 0, 100, 0, 0},
		{"within", 8, []int{5}, 0, 100, 0, 5},
		{"from an offset", 8, []int{5}, 2, 100, 2, 3},
		{"full", 8, []int{8}, 0, 100, 0, 8},
		{"wrapped: the oldest kept", 8, []int{5, 6}, 0, 100, 3, 8},
		{"wrapped: from inside", 8, []int{5, 6}, 6, 100, 6, 5},
		{"many wraps", 8, []int{3, 3, 3, 3, 3, 3, 3}, 0, 100, 13, 8},
		{"one write over the size", 8, []int{20}, 0, 100, 12, 8},
		{"over the size after some", 8, []int{3, 20}, 0, 100, 15, 8},
		{"bounded by max", 8, []int{5, 6}, 0, 3, 3, 3},
		{"past the end", 8, []int{5}, 9, 100, 5, 0},
		{"negative: the last bytes", 8, []int{5, 6}, -4, 100, 7, 4},
		{"negative past the oldest", 8, []int{5, 6}, -100, 100, 3, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.size)
			w := 0
			for _, n := range tt.writes {
				if got, err := r.Write(stream(w, n)); got != n || err != nil {
					t.Fatalf("Write = %d, %v", got, err)
				}
				w += n
			}
			if r.written() != int64(w) {
				t.Errorf("written = %d, want %d", r.written(), w)
			}
			data, start, eof := r.read(tt.off, tt.max)
			if start != tt.start || len(data) != tt.n || eof {
				t.Fatalf("read(%d, %d) = %d bytes from %d (eof %v), want %d from %d", tt.off, tt.max, len(data), start, eof, tt.n, tt.start)
			}
			if d := cmp.Diff(stream(int(tt.start), tt.n), data); d != "" {
				t.Errorf("data (-want +got):\n%s", d)
			}
			if cap(r.buf) > tt.size {
				t.Errorf("the ring holds %d bytes of memory, more than its %d", cap(r.buf), tt.size)
			}
		})
	}
}

// TestRingMemory writes a ring of the real size in small chunks: its
// buffer grows to exactly the size, never past it.
func TestRingMemory(t *testing.T) {
	r := newRing(ProcessRingBytes)
	chunk := stream(0, 1000)
	for range 3 * ProcessRingBytes / 1000 {
		r.Write(chunk)
	}
	if cap(r.buf) != ProcessRingBytes || len(r.buf) != ProcessRingBytes {
		t.Errorf("ring buffer len %d cap %d, want %d", len(r.buf), cap(r.buf), ProcessRingBytes)
	}
}

func TestRingFollow(t *testing.T) {
	r := newRing(16)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := r.wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on an empty ring: %v", err)
	}
	go func() {
		r.Write([]byte("abc"))
		r.close()
	}()
	if err := r.wait(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(t.Context(), 3); err != nil { // returns at close
		t.Fatal(err)
	}
	data, _, eof := r.read(0, 100)
	if string(data) != "abc" || !eof {
		t.Errorf("read after close = %q, eof %v", data, eof)
	}
	if n, err := r.Write([]byte("late")); n != 4 || err != nil || r.written() != 3 {
		t.Errorf("a write after close: %d %v, written %d", n, err, r.written())
	}
}

func TestStdinQueue(t *testing.T) {
	q := newStdinQueue(4, []byte("ab"))
	// Room for two more bytes: a bigger write queues them and waits.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	n, err := q.write(ctx, []byte("cdef"))
	if n != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write into a full queue = %d, %v", n, err)
	}
	// A reader makes room; the rest goes in.
	done := make(chan error, 1)
	go func() {
		_, err := q.write(t.Context(), []byte("ef"))
		done <- err
	}()
	var got bytes.Buffer
	buf := make([]byte, 3)
	for got.Len() < 6 {
		n, err := q.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got.Write(buf[:n])
	}
	if err := <-done; err != nil || got.String() != "abcdef" {
		t.Fatalf("read %q, write %v", got.String(), err)
	}
	q.closeInput()
	if _, err := q.Read(buf); err != io.EOF {
		t.Errorf("Read after close: %v", err)
	}
	if _, err := q.write(t.Context(), []byte("x")); !errors.Is(err, errStdinClosed) {
		t.Errorf("write after close: %v", err)
	}
	q = newStdinQueue(4, nil)
	q.kill()
	if _, err := q.write(t.Context(), []byte("x")); !errors.Is(err, errProcessEnded) {
		t.Errorf("write to an ended process: %v", err)
	}
	if _, err := q.Read(buf); err != io.EOF {
		t.Errorf("Read after the end: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"": 15, "TERM": 15, "sigterm": 15, "KILL": 9, "9": 9, "int": 2, "HUP": 1} {
		if got, err := ParseSignal(in); err != nil || int(got) != want {
			t.Errorf("ParseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "65", "-1", "TERMINATE", "SIG", "9x"} {
		if _, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) accepted", in)
		}
	}
}
