package local

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSeccompProgram checks the assembled program's shape: whole
// instructions, every jump inside the program, and a return at the end of
// every path (the kernel's verifier checks the same when bubblewrap loads
// it; the jail tests check its effect).
func TestSeccompProgram(t *testing.T) {
	prog, err := seccompFilter()
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog) == 0 {
		t.Fatalf("program of %d bytes", len(prog))
	}
	n := len(prog) / 8
	if n > unix.BPF_MAXINSNS {
		t.Fatalf("%d instructions", n)
	}
	rets := 0
	for pc := 0; pc < n; pc++ {
		code := binary.LittleEndian.Uint16(prog[8*pc:])
		jt, jf := int(prog[8*pc+2]), int(prog[8*pc+3])
		switch code & 0x07 {
		case unix.BPF_JMP:
			if pc+1+max(jt, jf) >= n {
				t.Errorf("instruction %d jumps past the end", pc)
			}
		case unix.BPF_RET:
			rets++
		}
	}
	last := binary.LittleEndian.Uint16(prog[8*(n-1):])
	if last&0x07 != unix.BPF_RET {
		t.Error("the program does not end with a return")
	}
	// The first instructions check the architecture and kill on mismatch.
	if k := binary.LittleEndian.Uint32(prog[4:]); k != offArch {
		t.Errorf("first load is of offset %d, want the architecture (%d)", k, offArch)
	}
	lastK := binary.LittleEndian.Uint32(prog[8*(n-1)+4:])
	if lastK != unix.SECCOMP_RET_KILL_PROCESS {
		t.Errorf("last return %#x, want kill process", lastK)
	}
	t.Logf("%d instructions, %d returns", n, rets)
}

func TestSeccompUndefinedLabel(t *testing.T) {
	p := &program{labels: map[string]int{}}
	p.jeq(1, "nowhere")
	if _, err := p.assemble(); err == nil {
		t.Error("assembled a jump to an undefined label")
	}
}
