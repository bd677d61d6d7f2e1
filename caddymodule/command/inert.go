package command

import (
	"errors"
	"io"
	"unicode/utf8"

	"github.com/spf13/cobra"

	inertpkg "github.com/idemgate/idemgate/internal/inert"
)

// Keys, bodies, reasons and error texts that the CLI prints come from
// notifications, that is from whoever can reach the gateway. A key that
// holds ESC sequences, printed raw, rewrites the operator's screen (clears
// it, moves the cursor, sets the window title, on some terminals answers
// back). Everything the CLI writes goes through inert: control characters
// other than newline and tab, C1 controls, bidirectional overrides and
// bytes that are not UTF-8 are written as visible escapes (\x1b, \u202e).

// inert is s with every character that could steer a terminal escaped
// (internal/inert: the console shows refused bodies the same way).
func inert(s string) string { return inertpkg.String(s) }

// inertWriter writes through inert. A character split across two writes
// (a tabwriter flushes cells as they come) waits for its end.
type inertWriter struct {
	w       io.Writer
	pending []byte
}

func (iw *inertWriter) Write(p []byte) (int, error) {
	buf := append(iw.pending, p...)
	// Keep an incomplete UTF-8 sequence at the end for the next write.
	cut := len(buf)
	for k := 1; k < utf8.UTFMax && k <= len(buf); k++ {
		if c := buf[len(buf)-k]; utf8.RuneStart(c) {
			if !utf8.FullRune(buf[len(buf)-k:]) {
				cut = len(buf) - k
			}
			break
		}
	}
	iw.pending = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(iw.w, inert(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes what waits for the rest of a character that never came.
func (iw *inertWriter) flush() {
	if len(iw.pending) > 0 {
		_, _ = io.WriteString(iw.w, inert(string(iw.pending)))
		iw.pending = nil
	}
}

// inertError is an error whose text is made inert where it is printed,
// and that still unwraps to the original.
type inertError struct{ err error }

func (e inertError) Error() string { return inert(e.err.Error()) }
func (e inertError) Unwrap() error { return e.err }

// makeInert routes every output of c's subcommands through inert: their
// standard output and error, and the error each returns (printed by the
// root command, outside their writers).
func makeInert(c *cobra.Command) {
	for _, sub := range c.Commands() {
		run := sub.RunE
		if run == nil {
			continue
		}
		sub.RunE = func(cmd *cobra.Command, args []string) error {
			out, errOut := &inertWriter{w: cmd.OutOrStdout()}, &inertWriter{w: cmd.ErrOrStderr()}
			cmd.SetOut(out)
			cmd.SetErr(errOut)
			err := run(cmd, args)
			out.flush()
			errOut.flush()
			var ie inertError
			if err != nil && !errors.As(err, &ie) {
				err = inertError{err}
			}
			return err
		}
	}
}
