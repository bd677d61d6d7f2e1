package caddymodule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		if r := notify(t, base, "cb-"+itoa(i)); r.status != 200 || r.body != "success" {
			t.Fatalf("ack while paused: %d %q", r.status, r.body)
		}
	}
	run("reload", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	if q := text("#queues"); !strings.Contains(q, "paused") || !strings.Contains(q, "3") || !strings.Contains(q, "Resume") {
		t.Fatalf("queue table while paused: %q", q)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(artefactDir(t), "console-async-paused.png"), png, 0o644); err != nil {
		t.Fatal(err)
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
