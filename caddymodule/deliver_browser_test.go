package caddymodule

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestAsyncConsoleBrowser: in a real headless Chromium with JavaScript
// off, the console's overview shows the async scope's queue, and its
// Pause and Resume buttons stop and restart the deliveries.
func TestAsyncConsoleBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("chromium is needed at %s (apt-get install chromium; .ci/run does): %v", chromiumPath, err)
	}
	be := newAsyncBackend(t, "127.0.0.1:0")
	base := startCaddy(t, asyncRoute+`
	route /console/* {
		idempotency_console {
			refresh off
		}
	}`, "{store}", "store memory", "{backend}", be.addr(), "{extra}", "")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if _, err := chromedp.Call(bctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("turning JavaScript off: %v", err)
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 15*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("main")))
			t.Fatalf("%s: %v; the page says:\n%s", what, err, body)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}

	run("overview", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	if q := text("#queues"); !strings.Contains(q, "demo") || !strings.Contains(q, "delivering") {
		t.Fatalf("queue table before the pause: %q", q)
	}
	run("pause", chromedp.Click(chromedp.CSS(`#queues button`)), chromedp.WaitVisible(chromedp.CSS(".note")))
	if note := text(".note"); !strings.Contains(note, "Deliveries paused") {
		t.Errorf("note after the pause: %q", note)
	}
	for i := range 3 {
		if r := notify(t, base, "cb-"+itoa(i)); r.status != 200 || r.body != "success" {
			t.Fatalf("ack while paused: %d %q", r.status, r.body)
		}
	}
	run("reload", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	if q := text("#queues"); !strings.Contains(q, "paused") || !strings.Contains(q, "3") || !strings.Contains(q, "Resume") {
		t.Fatalf("queue table while paused: %q", q)
	}
	time.Sleep(3 * maxTakeWait) // takes that would have started by now
	if got := be.total(); got != 0 {
		t.Fatalf("backend ran %d times while paused", got)
	}
	run("resume", chromedp.Click(chromedp.CSS(`#queues button`)), chromedp.WaitVisible(chromedp.CSS(".note")))
	if note := text(".note"); !strings.Contains(note, "Deliveries resumed") {
		t.Errorf("note after the resume: %q", note)
	}
	for i := range 3 {
		waitAnswered(t, 10*time.Second, "demo:cb-"+itoa(i))
		if got := be.count("cb-" + itoa(i)); got != 1 {
			t.Errorf("cb-%d: backend ran %d times, want 1", i, got)
		}
	}
}
