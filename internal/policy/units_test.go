package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestByteSizeUnmarshal(t *testing.T) {
	tests := []struct {
		in      string // JSON
		want    ByteSize
		wantErr string
	}{
		{in: `1024`, want: 1024},
		{in: `"1024"`, want: 1024},
		{in: `"1024B"`, want: 1024},
		{in: `"512M"`, want: 512 << 20},
		{in: `"512m"`, want: 512 << 20},
		{in: `"512Mi"`, want: 512 << 20},
		{in: `"512MiB"`, want: 512 << 20},
		{in: `"512mb"`, want: 512 << 20},
		{in: `"2G"`, want: 2 << 30},
		{in: `"1.5G"`, want: 3 << 29},
		{in: `"100k"`, want: 100 << 10},
		{in: `"1T"`, want: 1 << 40},
		{in: `"1.1K"`, want: 1126}, // 1126.4, rounded to a whole byte
		{in: `0`, want: 0},
		{in: `1e9`, want: 1e9},
		{in: `"8388607T"`, want: 8388607 << 40},

		{in: `"12X"`, wantErr: "want a number of bytes or a number with a unit"},
		{in: `"1i"`, wantErr: "want a number of bytes"},
		{in: `"G"`, wantErr: "want a number of bytes"},
		{in: `"512 M"`, wantErr: "want a number of bytes"},
		{in: `"-1G"`, wantErr: "want a number of bytes"},
		{in: `".5G"`, wantErr: "want a number of bytes"},
		{in: `""`, wantErr: "want a number of bytes"},
		{in: `-1`, wantErr: "cannot be negative"},
		{in: `"8388608T"`, wantErr: "too large"},
		{in: `1e400`, wantErr: "out of range"},
		{in: `true`, wantErr: "not a boolean"},
		{in: `[1]`, wantErr: "not a list"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got ByteSize
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("unmarshal %s = %d, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("unmarshal %s = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   ByteSize
		want string
	}{
		{0, "0"},
		{1023, "1023"},
		{1024, "1K"},
		{3 << 29, "1536M"},
		{8 << 30, "8G"},
		{1 << 40, "1T"},
		{1<<40 + 1, "1099511627777"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.in.String(); got != tt.want {
				t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
			}
			b, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			var back ByteSize
			if err := json.Unmarshal(b, &back); err != nil || back != tt.in {
				t.Errorf("round trip through %s = %d, %v", b, back, err)
			}
		})
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in      string // JSON
		want    time.Duration
		canon   string
		wantErr string
	}{
		{in: `"30s"`, want: 30 * time.Second, canon: "30s"},
		{in: `"2h"`, want: 2 * time.Hour, canon: "2h"},
		{in: `"90m"`, want: 90 * time.Minute, canon: "1h30m"},
		{in: `"1h0m30s"`, want: time.Hour + 30*time.Second, canon: "1h0m30s"},
		{in: `"168h"`, want: 168 * time.Hour, canon: "168h"},
		{in: `"1.5s"`, want: 1500 * time.Millisecond, canon: "1.5s"},
		{in: `30`, want: 30 * time.Second, canon: "30s"},
		{in: `1.5`, want: 1500 * time.Millisecond, canon: "1.5s"},
		{in: `0.1`, want: 100 * time.Millisecond, canon: "100ms"},
		{in: `0`, want: 0, canon: "0s"},

		{in: `"7d"`, wantErr: "want a duration like"},
		{in: `"30"`, wantErr: "want a duration like"},
		{in: `"-1s"`, wantErr: "cannot be negative"},
		{in: `-1`, wantErr: "cannot be negative"},
		{in: `1e30`, wantErr: "too long"},
		{in: `true`, wantErr: "not a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var got Duration
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("unmarshal %s = %v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || time.Duration(got) != tt.want {
				t.Fatalf("unmarshal %s = %v, %v; want %v", tt.in, time.Duration(got), err, tt.want)
			}
			if s := got.String(); s != tt.canon {
				t.Errorf("String() = %q, want %q", s, tt.canon)
			}
			b, _ := json.Marshal(got)
			var back Duration
			if err := json.Unmarshal(b, &back); err != nil || back != got {
				t.Errorf("round trip through %s = %v, %v", b, back, err)
			}
		})
	}
}
