package cfparse

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestBlock: every subdirective reaches each once, in order; a name given
// twice is refused, naming the block it is in.
func TestBlock(t *testing.T) {
	for _, tc := range []struct {
		name, input, what, want string
		seen                    []string
	}{
		{"directive", "d {\n\ta 1\n\tb 2\n}", "", "", []string{"a", "b"}},
		{"twice", "d {\n\ta 1\n\ta 2\n}", "", `duplicate subdirective "a"`, []string{"a"}},
		{"nested twice", "d {\n\ta 1\n\ta 2\n}", "store redis", `store redis: duplicate option "a"`, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := caddyfile.NewTestDispenser(tc.input)
			d.Next()
			var seen []string
			err := Block(d, 0, tc.what, func(name string) error {
				seen = append(seen, name)
				var v string
				return OneArg(d, &v)
			})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if strings.Join(seen, ",") != strings.Join(tc.seen, ",") {
				t.Errorf("each saw %v, want %v", seen, tc.seen)
			}
		})
	}
}

// TestArgs: the readers take exactly what they say and refuse the rest.
func TestArgs(t *testing.T) {
	d := caddyfile.NewTestDispenser("x 64KiB 2s 1 2 extra")
	d.Next()
	var size int64
	if err := SizeArg(d, &size); err == nil {
		t.Fatal("SizeArg took a line with more than one argument")
	}
	d = caddyfile.NewTestDispenser("x 64KiB")
	d.Next()
	if err := SizeArg(d, &size); err != nil || size != 64<<10 {
		t.Fatalf("SizeArg: %d %v", size, err)
	}
	d = caddyfile.NewTestDispenser("x -2s")
	d.Next()
	if err := DurationArg(d, new(caddy.Duration)); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Fatalf("DurationArg of -2s: %v", err)
	}
	d = caddyfile.NewTestDispenser("x")
	d.Next()
	var list []string
	if err := ListArg(d, &list); err == nil {
		t.Fatal("ListArg took no argument")
	}
}
