package console

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// fitWidths are the window widths at which every console page must fit:
// a laptop's, and a narrow window beside another.
var fitWidths = []int64{1280, 800}

// fitScript lists what does not fit on the page: a table wider than its
// card (the section around it, unless the card scrolls sideways), a page
// that scrolls sideways, and a timestamp broken inside its date or its
// time (a break at the space between them is fine).
const fitScript = `(() => {
  const bad = [];
  const name = (el) => el.id ? '#' + el.id : (el.closest('[id]') ? 'in #' + el.closest('[id]').id : el.tagName.toLowerCase());
  for (const t of document.querySelectorAll('main table')) {
    const card = t.closest('section') || t.closest('main');
    const cs = getComputedStyle(card);
    if (cs.overflowX === 'auto' || cs.overflowX === 'scroll') continue;
    const c = card.getBoundingClientRect();
    const left = c.left + card.clientLeft + parseFloat(cs.paddingLeft);
    const right = c.left + card.clientLeft + card.clientWidth - parseFloat(cs.paddingRight);
    const r = t.getBoundingClientRect();
    if (r.left < left - 0.5 || r.right > right + 0.5 || t.scrollWidth > right - left + 0.5) {
      bad.push('table ' + name(t) + ' is ' + Math.round(Math.max(r.width, t.scrollWidth)) + 'px wide in a card of ' + Math.round(right - left) + 'px');
    }
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth) {
    bad.push('the page scrolls sideways: ' + doc.scrollWidth + 'px in a window of ' + doc.clientWidth + 'px');
  }
  const ts = /(\d{4}-\d\d-\d\d) (\d\d:\d\d(:\d\d(\.\d+)?)?Z?)/g;
  const walk = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.parentElement.closest('pre, details:not([open])')) continue;
    for (const m of n.data.matchAll(ts)) {
      for (const [from, len] of [[m.index, m[1].length], [m.index + m[1].length + 1, m[2].length]]) {
        const rg = document.createRange();
        rg.setStart(n, from);
        rg.setEnd(n, from + len);
        const lines = new Set([...rg.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (lines.size > 1) bad.push('timestamp ' + JSON.stringify(m[0]) + ' ' + name(n.parentElement) + ' breaks inside ' + JSON.stringify(n.data.substr(from, len)));
      }
    }
  }
  return bad;
})()`

// assertFits checks the page in the browser at each of fitWidths, and
// leaves the window at 1280px. page names it in failures.
func assertFits(t *testing.T, bctx context.Context, page string) {
	t.Helper()
	for _, w := range fitWidths {
		bad := fitsAt(t, bctx, w)
		for _, b := range bad {
			t.Errorf("%s at %dpx: %s", page, w, b)
		}
	}
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatalf("window back to 1280px: %v", err)
	}
}

// fitsAt sizes the window to width and returns what does not fit.
func fitsAt(t *testing.T, bctx context.Context, width int64) []string {
	t.Helper()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(width, 1000)); err != nil {
		t.Fatalf("window at %dpx: %v", width, err)
	}
	bad, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](fitScript))
	if err != nil {
		t.Fatalf("measuring the page at %dpx: %v", width, err)
	}
	return bad
}

// shotAt saves a full-page screenshot at width, then sets the window back
// to 1280px.
func shotAt(t *testing.T, bctx context.Context, dir, name string, width int64) {
	t.Helper()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(width, 1000)); err != nil {
		t.Fatalf("window at %dpx: %v", width, err)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s at %dpx: %v", name, width, err)
	}
	saveShot(t, dir, name, png)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatalf("window back to 1280px: %v", err)
	}
}
