package gate

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads the whole body whatever its declared length says, in
// reads of any size, up to one byte past its limit, and passes a
// reader's error on.
func TestReadAll(t *testing.T) {
	const body = "out_trade_no=o-1&total_amount=9.90"
	for _, c := range []struct {
		name string
		size int64
	}{
		{"declared", int64(len(body))},
		{"undeclared", -1},
		{"declared shorter", 5},
		{"declared longer", 100},
		{"declared empty", 0},
	} {
		for _, rd := range []struct {
			name string
			r    func() io.Reader
		}{
			{"whole", func() io.Reader { return strings.NewReader(body) }},
			{"a byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }},
			{"EOF with the data", func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) }},
		} {
			got, err := readAll(rd.r(), c.size, 1<<20)
			if err != nil || string(got) != body {
				t.Errorf("%s, %s: %q %v", c.name, rd.name, got, err)
			}
		}
	}
	cut := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader(body[:10]), iotest.ErrReader(cut))
	if got, err := readAll(r, int64(len(body)), 1<<20); !errors.Is(err, cut) || got != nil {
		t.Errorf("a body cut short: %q %v, want the reader's error", got, err)
	}
	if got, err := readAll(strings.NewReader(""), 0, 1<<20); err != nil || len(got) != 0 {
		t.Errorf("an empty body: %q %v", got, err)
	}
	// Past its limit, a body is read one byte further, not to its end,
	// whatever it declared.
	for _, size := range []int64{-1, 5, 10, int64(len(body)), 100} {
		if got, err := readAll(strings.NewReader(body), size, 10); err != nil || string(got) != body[:11] {
			t.Errorf("declared %d, limit 10: %q %v, want %q", size, got, err, body[:11])
		}
	}
}
