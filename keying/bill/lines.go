package bill

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxLine bounds one line, and one quoted record across lines, so that a
// bill with no line end (or an unterminated quote) costs 64 KiB, not the
// whole file. The longest documented row (WeChat Pay's REFUND bill, 29
// columns) is well under 1 KiB.
const maxLine = 64 << 10

var errLineTooLong = errors.New("line longer than 64 KiB")

// lines reads a bill line by line. A returned line has no line end (\n or
// \r\n) and is valid until the next call.
type lines struct {
	br  *bufio.Reader
	n   int    // number of the last line returned, from 1
	eol bool   // the last line returned ended with '\n'
	rec []byte // a quoted record copied out of the reader's buffer
	off []int  // field boundaries in rec, two per field
}

func newLines(r io.Reader) *lines {
	return &lines{br: bufio.NewReaderSize(r, maxLine)}
}

// next returns the next line, or io.EOF after the last one.
func (l *lines) next() ([]byte, error) {
	b, err := l.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		l.n++
		return nil, errLineTooLong
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err != nil && err != io.EOF:
		return nil, err
	}
	l.n++
	l.eol = len(b) > 0 && b[len(b)-1] == '\n'
	if l.eol {
		b = b[:len(b)-1]
	}
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b, nil
}

// SplitPlain splits a line on every comma into dst's storage, for a bill
// that quotes nothing (Alipay's, WeChat Pay's): a comma inside a value is
// a broken row, and the column count check that follows is what catches
// it.
func SplitPlain(dst [][]byte, line []byte) [][]byte {
	dst = dst[:0]
	for {
		i := bytes.IndexByte(line, ',')
		if i < 0 {
			return append(dst, line)
		}
		dst = append(dst, line[:i])
		line = line[i+1:]
	}
}

var (
	errQuote     = errors.New(`a '"' inside an unquoted value`)
	errAfterQuot = errors.New(`text after the closing '"' of a quoted value`)
	errOpenQuote = errors.New(`a quoted value is never closed`)
)

// record reads one RFC 4180 record (Stripe's and PayPal's CSV): a value may
// be quoted, and a quoted value may hold commas, doubled quotes and line
// ends. It returns the fields, valid until the next call, and the number of
// the record's first line.
func (l *lines) record(dst [][]byte) ([][]byte, int, error) {
	line, err := l.next()
	if err != nil {
		return nil, l.n, err
	}
	first := l.n
	if bytes.IndexByte(line, '"') < 0 {
		return SplitPlain(dst, line), first, nil
	}
	l.rec, l.off = l.rec[:0], l.off[:0]
	for {
		// At the start of a field.
		if len(line) == 0 || line[0] != '"' {
			i := bytes.IndexByte(line, ',')
			if i < 0 {
				i = len(line)
			}
			if bytes.IndexByte(line[:i], '"') >= 0 {
				return nil, first, errQuote
			}
			l.off = append(l.off, len(l.rec))
			l.rec = append(l.rec, line[:i]...)
			l.off = append(l.off, len(l.rec))
			if i == len(line) {
				break
			}
			line = line[i+1:]
			continue
		}
		line = line[1:]
		l.off = append(l.off, len(l.rec))
		for {
			i := bytes.IndexByte(line, '"')
			if i < 0 {
				// The value goes on over the line end.
				l.rec = append(l.rec, line...)
				l.rec = append(l.rec, '\n')
				if len(l.rec) > maxLine {
					return nil, first, errLineTooLong
				}
				if line, err = l.next(); err != nil {
					if err == io.EOF {
						err = errOpenQuote
					}
					return nil, first, err
				}
				continue
			}
			l.rec = append(l.rec, line[:i]...)
			line = line[i+1:]
			if len(line) > 0 && line[0] == '"' {
				l.rec = append(l.rec, '"')
				line = line[1:]
				continue
			}
			break
		}
		l.off = append(l.off, len(l.rec))
		if len(line) == 0 {
			break
		}
		if line[0] != ',' {
			return nil, first, errAfterQuot
		}
		line = line[1:]
	}
	dst = dst[:0]
	for i := 0; i+1 < len(l.off); i += 2 {
		dst = append(dst, l.rec[l.off[i]:l.off[i+1]])
	}
	return dst, first, nil
}
