package console

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/gatewaytest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestAsyncConsoleBrowser: in a real headless Chromium with JavaScript
// off, the console's overview shows the async scope's queue, and its
// Pause and Resume buttons stop and restart the deliveries.
func TestAsyncConsoleBrowser(t *testing.T) {
	testenv.Slow(t, "drives headless Chromium")
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute+`
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")

	bctx, run, text := headlessBrowser(t)

	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	if q := text("#queues"); !strings.Contains(q, "demo") || !strings.Contains(q, "delivering") {
		t.Fatalf("queue table before the pause: %q", q)
	}
	run("pause", chromedp.Click(chromedp.CSS(`#queues button`)), chromedp.WaitVisible(chromedp.CSS(".note")))
	if note := text(".note"); !strings.Contains(note, "Deliveries paused") {
		t.Errorf("note after the pause: %q", note)
	}
	for i := range 3 {
		if r := gatewaytest.Notify(t, base, "cb-"+strconv.Itoa(i)); r.Status != 200 || r.Body != "success" {
			t.Fatalf("ack while paused: %d %q", r.Status, r.Body)
		}
	}
	run("reload", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	if q := text("#queues"); !strings.Contains(q, "paused") || !strings.Contains(q, "3") || !strings.Contains(q, "Resume") {
		t.Fatalf("queue table while paused: %q", q)
	}
	assertFits(t, bctx, "overview with a paused queue")
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(artefactDir(t), "console-async-paused.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * takeWait) // takes that would have started by now
	if got := int(be.Total.Load()); got != 0 {
		t.Fatalf("backend ran %d times while paused", got)
	}
	run("resume", chromedp.Click(chromedp.CSS(`#queues button`)), chromedp.WaitVisible(chromedp.CSS(".note")))
	if note := text(".note"); !strings.Contains(note, "Deliveries resumed") {
		t.Errorf("note after the resume: %q", note)
	}
	for i := range 3 {
		gatewaytest.WaitAnswered(t, 10*time.Second, "demo:cb-"+strconv.Itoa(i))
		if got := be.Count("cb-" + strconv.Itoa(i)); got != 1 {
			t.Errorf("cb-%d: backend ran %d times, want 1", i, got)
		}
	}
}

// TestAsyncConsole: the console's overview shows each async scope's queue
// and pauses and resumes it with a same-origin POST carrying its token; a
// cross-site POST changes nothing.
func TestAsyncConsole(t *testing.T) {
	be := gatewaytest.NewBackend(t)
	base := gatewaytest.StartCaddy(t, gatewaytest.AsyncRoute+`
	route /console/* {
		idempotency_console
	}`, "{store}", "store memory", "{backend}", be.Addr(), "{extra}", "")
	send := func(form url.Values, hdr map[string]string) int {
		t.Helper()
		return consolePost(t, base+"/console/deliveries", form, hdr)
	}
	page := func() string {
		t.Helper()
		resp, err := gatewaytest.Client.Get(base + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return string(b)
	}
	origin := map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}
	pause := url.Values{"csrf": {consoleToken}, "scope": {"demo"}, "action": {"pause"}}
	if got := send(pause, map[string]string{"Origin": "http://evil.example"}); got != http.StatusForbidden {
		t.Errorf("cross-site pause: %d, want 403", got)
	}
	if got := send(url.Values{"scope": {"demo"}, "action": {"pause"}}, nil); got != http.StatusForbidden {
		t.Errorf("pause without the token: %d, want 403", got)
	}
	if p := page(); !strings.Contains(p, "asynchronous delivery") || !strings.Contains(p, `<code>demo</code>`) || strings.Contains(p, "badge failed\">paused") {
		t.Fatalf("overview before the pause:\n%s", p)
	}
	if got := send(pause, origin); got != http.StatusSeeOther {
		t.Fatalf("pause: %d, want 303", got)
	}
	for i := range 3 {
		if r := gatewaytest.Notify(t, base, "c-"+strconv.Itoa(i)); r.Status != 200 || r.Body != "success" {
			t.Fatalf("ack while paused: %d %q", r.Status, r.Body)
		}
	}
	p := page()
	if !strings.Contains(p, `badge failed">paused`) || !strings.Contains(p, `<td class="num">3</td>`) || !strings.Contains(p, `value="resume"`) {
		t.Fatalf("overview while paused shows no paused queue of 3:\n%s", p)
	}
	time.Sleep(3 * takeWait)
	if got := int(be.Total.Load()); got != 0 {
		t.Fatalf("backend ran %d times while paused", got)
	}
	if got := send(url.Values{"csrf": {consoleToken}, "scope": {"demo"}, "action": {"resume"}}, origin); got != http.StatusSeeOther {
		t.Fatalf("resume: %d, want 303", got)
	}
	for i := range 3 {
		gatewaytest.WaitAnswered(t, 10*time.Second, "demo:c-"+strconv.Itoa(i))
		if got := be.Count("c-" + strconv.Itoa(i)); got != 1 {
			t.Errorf("c-%d: backend ran %d times, want 1", i, got)
		}
	}
}

// takeWait is the delivery engine's longest sleep between takes
// (caddymodule's maxTakeWait): a paused queue that was not paused would
// have been taken within it.
const takeWait = 200 * time.Millisecond
