package command

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/billsample"
	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/reconcile"
)

// TestReconcileWalkthrough runs docs/reconcile.md as written: its
// keygen, its send commands against an Alipay route like
// examples/alipay.Caddyfile's, its `go run ./examples/bills …` (the
// script's own code, billtest.Samples, with the page's arguments) and its
// reconcile commands, whose bill is a pattern the shell expands (here
// filepath.Glob) — the commands unchanged whatever the day, and each
// report must be the one the page shows, but for the day (the page's run
// was on 2026-12-03; this one is today).
func TestReconcileWalkthrough(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "reconcile.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := runCLI(t, "keygen", "--platform", "alipay", "--dir", filepath.Join(dir, "keys")); err != nil {
		t.Fatal(err)
	}
	be := gatewaytest.NewBackend(t)
	be.SetAnswer(func(string, int, *http.Request) (int, string, time.Duration) { return 200, "success", 0 })
	g := gatewaytest.StartGateway(t, `
	handle /notify {
		idempotency {
			platform alipay
			public_key `+filepath.Join(dir, "keys", "alipay_public_key.pem")+`
			store memory
		}
		rewrite * /notify
		reverse_proxy {backend}
	}`, "{backend}", be.Addr())

	today := time.Now().In(time.FixedZone("CST", 8*3600))
	// The page's payments are sent now: in the Beijing day's last 15
	// minutes the one its bill leaves out is pending the next bill, not
	// run, not settled, and the report is checked by its counts instead.
	lastMinutes := today.Hour() == 23 && today.Minute() >= 44
	// The day in the outputs: the bills' file names and the period (the
	// trade numbers stay as the commands give them).
	day := func(s string) string {
		s = strings.ReplaceAll(s, "_20261203", "_"+today.Format("20060102"))
		s = strings.ReplaceAll(s, "2026-12-04", today.AddDate(0, 0, 1).Format(time.DateOnly))
		return strings.ReplaceAll(s, "2026-12-03", today.Format(time.DateOnly))
	}
	ran := map[string]int{}
	for _, c := range pageCommands(t, string(page)) {
		// The commands as the page writes them: they name no day. The
		// outputs carry it, today's here (the Beijing day, the bills';
		// not UTC's, which differs from 16:00 to 24:00 UTC).
		args := strings.Fields(c.line)
		switch {
		case strings.HasPrefix(c.line, "go run ./examples/bills "):
			args = args[3:]
			for i := range args {
				if args[i] == "-out" {
					args[i+1] = filepath.Join(dir, args[i+1])
				}
			}
			var out strings.Builder
			if err := billsample.Samples(args, &out); err != nil {
				t.Fatalf("%s: %v", c.line, err)
			}
			if got, want := strings.ReplaceAll(out.String(), dir+"/", ""), day(c.output); got != want {
				t.Errorf("%s printed\n%s\nthe page shows\n%s", c.line, got, want)
			}
		case strings.HasPrefix(c.line, "./idemgate idempotency send "):
			args = append(args[2:], "--dir", filepath.Join(dir, "keys"))
			for i := range args {
				if args[i] == "--url" {
					args[i+1] = g.Base + "/notify"
				}
			}
			out, err := runCLI(t, args...)
			if err != nil || !strings.Contains(out, "HTTP/1.1 200 OK") || !strings.Contains(out, "success") {
				t.Fatalf("%s: %v\n%s", c.line, err, out)
			}
		case strings.HasPrefix(c.line, "./idemgate idempotency reconcile "):
			args = append(args[2:], "--address", g.Admin)
			for i := range args {
				if args[i] == "--bill" {
					files, err := filepath.Glob(filepath.Join(dir, args[i+1]))
					if err != nil || len(files) != 1 {
						t.Fatalf("%s: --bill %s names %v (%v), want one file", c.line, args[i+1], files, err)
					}
					args[i+1] = files[0]
				}
			}
			if lastMinutes && strings.Contains(c.output, "CATEGORY") {
				out, _ := runCLI(t, append(args, "--json")...)
				var rep reconcile.Report
				if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.SettledNeverRun.Count != 1 || rep.RunNotSettled.Count != 0 ||
					rep.AmountDiffers.Count != 1 || rep.Matched.Count != 2 || rep.PendingNextBill.Count != 1 {
					t.Errorf("%s, in the day's last minutes: %v %+v", c.line, err, rep)
				}
				ran[args[0]]++
				continue
			}
			out, err := runCLI(t, args...)
			if err != nil {
				out += "Error: " + err.Error() + "\n"
			}
			if got, want := trimLines(out), trimLines(day(c.output)); got != want {
				t.Errorf("%s printed\n%s\nthe page shows\n%s", c.line, got, want)
			}
		default:
			continue // building, keygen and the demo: the test's gateway stands in
		}
		ran[args[0]]++
	}
	if ran["send"] != 4 || ran["reconcile"] != 3 || ran["-platform"] != 2 {
		t.Errorf("the page's commands run: %v", ran)
	}
}

// pageCommand is a "$ " line of the page's code blocks and the output
// pasted under it.
type pageCommand struct{ line, output string }

func pageCommands(t *testing.T, page string) []pageCommand {
	var cmds []pageCommand
	block := regexp.MustCompile("(?s)```\n(.*?)```")
	for _, m := range block.FindAllStringSubmatch(page, -1) {
		for _, l := range strings.SplitAfter(m[1], "\n") {
			if c, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, pageCommand{line: strings.TrimSpace(c)})
			} else if len(cmds) > 0 && l != "" {
				cmds[len(cmds)-1].output += l
			}
		}
	}
	if len(cmds) < 8 {
		t.Fatalf("the page has %d commands", len(cmds))
	}
	return cmds
}

// trimLines drops trailing spaces (a table's last column may be empty).
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " ")
	}
	return strings.Join(lines, "\n")
}
