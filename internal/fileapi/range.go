package fileapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/apitypes"
	"github.com/agentbox/agentbox/internal/errdefs"
)

// maxScanBytes bounds how far a read by lines reads into a file to find
// its first line: a line range of a file of any size costs at most this.
const maxScanBytes = 1 << 30

// Range selects part of a file: a byte range (Offset, Length) or a line
// range (FirstLine to LastLine, 1-based and inclusive). The zero Range is
// the whole file.
type Range struct {
	// Offset is the first byte; Length the number of bytes from it, 0
	// meaning to the end of the file.
	Offset, Length int64
	// FirstLine, when positive, selects lines instead of bytes: from
	// FirstLine to LastLine, 0 meaning to the end of the file.
	FirstLine, LastLine int
}

// Lines reports whether r selects lines.
func (r Range) Lines() bool { return r.FirstLine > 0 }

// ParseLines reads a line range as the CLI and the API take it: "40:80"
// (lines 40 to 80), "40:" (40 to the end), ":80" (1 to 80) or "40" (line
// 40 alone). Lines are 1-based.
func ParseLines(s string) (first, last int, err error) {
	bad := func(why string) (int, int, error) {
		return 0, 0, errdefs.Invalid("line range %q: %s (use FIRST:LAST, FIRST:, :LAST or LINE, 1-based)", s, why)
	}
	num := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1<<31-1 {
			return 0, errors.New("not a line number")
		}
		return n, nil
	}
	a, b, isRange := strings.Cut(s, ":")
	switch {
	case s == "" || s == ":":
		return bad("empty")
	case !isRange:
		n, err := num(a)
		if err != nil {
			return bad(err.Error())
		}
		return n, n, nil
	}
	first, last = 1, 0
	if a != "" {
		if first, err = num(a); err != nil {
			return bad("first: " + err.Error())
		}
	}
	if b != "" {
		if last, err = num(b); err != nil {
			return bad("last: " + err.Error())
		}
		if last < first {
			return bad("last line before the first")
		}
	}
	return first, last, nil
}

// ParseBytes reads a byte range "OFFSET:LENGTH" ("100:50" is 50 bytes
// from offset 100; "100:" is from 100 to the end).
func ParseBytes(s string) (offset, length int64, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok || a == "" {
		return 0, 0, errdefs.Invalid("byte range %q: use OFFSET:LENGTH or OFFSET: (bytes)", s)
	}
	if offset, err = strconv.ParseInt(a, 10, 64); err != nil || offset < 0 {
		return 0, 0, errdefs.Invalid("byte range %q: offset is not a non-negative integer", s)
	}
	if b != "" {
		if length, err = strconv.ParseInt(b, 10, 64); err != nil || length < 1 {
			return 0, 0, errdefs.Invalid("byte range %q: length is not a positive integer", s)
		}
	}
	return offset, length, nil
}

// ReadRange copies the part of the regular file at p that r selects to w
// and describes it (Content is left empty: see Content). Unlike Read it
// takes files of any size, since it reads only what the range needs; what
// it copies stays within MaxReadBytes, and a read by lines looks at most
// 1 GiB into the file for its first line. Symlinks, FIFOs and devices are
// treated as Read treats them.
func (f *FS) ReadRange(ctx context.Context, p string, r Range, w io.Writer) (apitypes.FileContent, error) {
	const op = "reading"
	p, err := cleanFor(op, p)
	if err != nil {
		return apitypes.FileContent{}, err
	}
	switch {
	case r.Offset < 0 || r.Length < 0 || r.FirstLine < 0 || r.LastLine < 0:
		return apitypes.FileContent{}, fmt.Errorf("%s %s: negative range: %w", op, p, errdefs.ErrInvalid)
	case r.Lines() && (r.Offset != 0 || r.Length != 0):
		return apitypes.FileContent{}, fmt.Errorf("%s %s: a range of lines and of bytes at once: %w", op, p, errdefs.ErrInvalid)
	case r.LastLine != 0 && r.LastLine < r.FirstLine:
		return apitypes.FileContent{}, fmt.Errorf("%s %s: last line %d before the first %d: %w", op, p, r.LastLine, r.FirstLine, errdefs.ErrInvalid)
	case r.Length > f.opts.MaxReadBytes:
		return apitypes.FileContent{}, fmt.Errorf("%s %s: %d bytes asked, over the %d-byte read limit: %w", op, p, r.Length, f.opts.MaxReadBytes, errdefs.ErrTooLarge)
	}
	file, fi, err := f.openRegular(ctx, op, p)
	if err != nil {
		return apitypes.FileContent{}, err
	}
	defer file.Close()
	fc := apitypes.FileContent{Path: p, Size: fi.Size()}
	if r.Lines() {
		return f.readLines(ctx, op, file, r, w, fc)
	}
	fc.Offset = min(r.Offset, fc.Size)
	length := fc.Size - fc.Offset
	if r.Length > 0 && r.Length < length {
		length = r.Length
	}
	if length > f.opts.MaxReadBytes {
		return fc, fmt.Errorf("%s %s: %d bytes from offset %d, over the %d-byte read limit (read a smaller range): %w", op, p, length, fc.Offset, f.opts.MaxReadBytes, errdefs.ErrTooLarge)
	}
	n, err := io.Copy(w, io.NewSectionReader(ctxReaderAt{ctx, file}, fc.Offset, length))
	fc.Length = n
	if err != nil {
		return fc, classify(op, p, err)
	}
	fc.EOF = fc.Offset+n >= fc.Size
	return fc, nil
}

// readLines copies lines r.FirstLine to r.LastLine of file to w.
func (f *FS) readLines(ctx context.Context, op string, file *os.File, r Range, w io.Writer, fc apitypes.FileContent) (apitypes.FileContent, error) {
	br := bufio.NewReaderSize(ctxReader{ctx, io.LimitReader(file, maxScanBytes)}, 64<<10)
	var offset int64
	line := 1
	fc.FirstLine = r.FirstLine
	for {
		if r.LastLine > 0 && line > r.LastLine {
			// Past the range: is there anything after it?
			_, err := br.Peek(1)
			fc.EOF = errors.Is(err, io.EOF)
			return fc, nil
		}
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 && line >= r.FirstLine {
			if fc.Length == 0 {
				fc.Offset = offset
			}
			if fc.Length+int64(len(chunk)) > f.opts.MaxReadBytes {
				return fc, fmt.Errorf("%s %s: lines %d to %d are over the %d-byte read limit (read fewer lines): %w", op, fc.Path, r.FirstLine, line, f.opts.MaxReadBytes, errdefs.ErrTooLarge)
			}
			if _, werr := w.Write(chunk); werr != nil {
				return fc, classify(op, fc.Path, werr)
			}
			fc.Length += int64(len(chunk))
			fc.LastLine = line
		}
		offset += int64(len(chunk))
		switch {
		case err == nil:
			line++
		case errors.Is(err, bufio.ErrBufferFull):
			// A long line: the rest of it comes in the next chunk.
		case errors.Is(err, io.EOF):
			if offset >= maxScanBytes && offset < fc.Size {
				return fc, fmt.Errorf("%s %s: line %d is not in the first %d bytes: %w", op, fc.Path, r.FirstLine, int64(maxScanBytes), errdefs.ErrTooLarge)
			}
			if fc.Length == 0 {
				fc.Offset = offset // nothing in range: the end of the file
			}
			fc.EOF = true
			return fc, nil
		default:
			return fc, classify(op, fc.Path, err)
		}
	}
}

// openRegular opens p for reading if it is a regular file, without
// blocking on a FIFO and deciding on the open descriptor's own type.
func (f *FS) openRegular(ctx context.Context, op, p string) (*os.File, os.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, classify(op, p, err)
	}
	fi, err := f.root.Stat(p)
	if err != nil {
		return nil, nil, classify(op, p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s %s: not a regular file (%s): %w", op, p, newInfo(p, fi).Type, errdefs.ErrInvalid)
	}
	file, err := f.root.OpenFile(p, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, nil, classify(op, p, err)
	}
	if fi, err = file.Stat(); err != nil {
		file.Close()
		return nil, nil, classify(op, p, err)
	}
	if !fi.Mode().IsRegular() {
		file.Close()
		return nil, nil, fmt.Errorf("%s %s: not a regular file (%s): %w", op, p, newInfo(p, fi).Type, errdefs.ErrInvalid)
	}
	return file, fi, nil
}

// Content fills in fc's Encoding and Content from data, the bytes a
// ReadRange copied, and its numbered Lines for a read by lines.
func Content(fc apitypes.FileContent, data []byte) apitypes.FileContent {
	if utf8.Valid(data) {
		fc.Encoding, fc.Content = "utf-8", string(data)
	} else {
		fc.Encoding, fc.Content = "base64", base64.StdEncoding.EncodeToString(data)
	}
	if fc.FirstLine > 0 {
		fc.Lines = []apitypes.Line{}
		for n := fc.FirstLine; len(data) > 0; n++ {
			text := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				text, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			// Invalid UTF-8 becomes U+FFFD in JSON; the exact bytes are
			// in Content.
			fc.Lines = append(fc.Lines, apitypes.Line{N: n, Text: string(bytes.TrimSuffix(text, []byte("\r")))})
		}
	}
	return fc
}

// ctxReaderAt fails a read once ctx is done.
type ctxReaderAt struct {
	ctx context.Context
	r   io.ReaderAt
}

func (c ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.ReadAt(p, off)
}
