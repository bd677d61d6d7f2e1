package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgate/idemgate/caddymodule/admin"
	"github.com/idemgate/idemgate/caddymodule/app"
	"github.com/idemgate/idemgate/store"
)

//go:embed templates/*.html
var consoleFS embed.FS

var consoleTemplates = template.Must(template.New("console").Funcs(template.FuncMap{
	"ts":   func(t time.Time) template.HTML { return stamp(t, "15:04:05Z") },
	"ago":  ago,
	"tsms": func(t time.Time) template.HTML { return stamp(t, "15:04:05.000Z") },
	"dur": func(d time.Duration) string {
		if d < 10*time.Millisecond {
			return d.Round(10 * time.Microsecond).String()
		}
		return d.Round(time.Millisecond).String()
	},
	"bulk": func(p *consolePage, state string, n int) bulkButton { return bulkButton{Page: p, State: state, N: n} },
	"rows": func(p *consolePage, rows []keyRow, empty string) rowsView {
		return rowsView{Page: p, Rows: rows, Empty: empty, More: len(rows) >= overviewLimit}
	},
}).ParseFS(consoleFS, "templates/*.html"))

// consolePage is what one page's templates see.
type consolePage struct {
	Base      string // the mount point, escaped, ending in "/"
	Page      string // overview, key, purge, error
	Title     string
	Nonce     string
	CSRF      string
	Now       time.Time
	Note      string // a fixed message after an action
	Err       string
	RefreshMS int64

	// The overview.
	Prefix                           string
	Chart                            chart
	Stores                           []string
	Delivery                         string
	Queues                           []admin.DeliveryView // deliver async scopes
	InFlight, Failed, Dead, Answered []keyRow
	Errors                           []string
	// Stakes: the money at stake, first on the overview; Scope filters
	// the lists (and offers Redeliver all), Scopes are the choices.
	Stakes []stake
	Scope  string
	Scopes []string
	// Bulk is "Redeliver all": its confirmation, then its results.
	Bulk *bulkPage

	// A key's page and the purge confirmation.
	Key *keyDetail

	// An order's page.
	Order      *admin.OrderView
	OrderStore string

	// The reconciliation page.
	Reconcile *reconcileView

	// The search page.
	Search *searchView

	// The refused notifications' page.
	Refused *refusedView

	// The missing page (missing.go); CatchUp: the scopes an order's page
	// offers "Query the platform" for.
	Missing *missingView
	CatchUp []queryScope
}

func (v *consolePage) fail(msg string) *consolePage {
	if v.Page == "" {
		v.Page = "error"
	}
	if v.Title == "" {
		v.Title = "Error"
	}
	v.Err = msg
	return v
}

// keyHref links a key's page (or another page about it).
func (v *consolePage) keyHref(page, storeID, key string) template.URL {
	return template.URL(v.Base + page + "?" + url.Values{"store": {storeID}, "k": {key}}.Encode())
}

// OrderHref links an order's page.
func (v *consolePage) OrderHref(storeID, order string) template.URL {
	return template.URL(v.Base + "order?" + url.Values{"store": {storeID}, "o": {order}}.Encode())
}

// Href is the template's way to keyHref.
func (v *consolePage) Href(page, storeID, key string) template.URL {
	return v.keyHref(page, storeID, key)
}

// bulkButton is "Redeliver all" above a list.
type bulkButton struct {
	Page  *consolePage
	State string
	N     int
}

// rowsView is one list of keys with its page.
type rowsView struct {
	Page  *consolePage
	Rows  []keyRow
	Empty string
	More  bool // the list may go on: a store gave a full page
}

// keyRow is a key in a list.
type keyRow struct {
	Store, Key string
	State      string
	// Retries is a failed key's retry budget at its platform, in words.
	Retries   string
	Status    int
	Copies    int64
	Attempts  int64
	FirstSeen time.Time
	Changed   time.Time
}

func newKeyRow(a *app.App, storeID string, rec *store.Record, st admin.KeyState, now time.Time) keyRow {
	r := keyRow{Store: storeID, Key: rec.Key, State: st.State, Status: rec.Status, Copies: rec.Copies,
		Attempts: rec.AttemptCount, FirstSeen: rec.FirstSeen, Changed: rec.Changed, Retries: retriesText(a, rec, st.State, now)}
	if st.Async {
		r.Retries = "none: the platform has its ack (deliver async)"
	}
	return r
}

// keyDetail is a key's page.
type keyDetail struct {
	keyRow
	// Order and Event: the business event of an order the key stands for
	// ("" for a key that is its own).
	Order, Event string
	LastSeen     time.Time
	ExpiresAt    time.Time
	CopyOutcomes store.CopyCounts
	Conflicts    int64
	Timeline     []event
	Notification *notificationDetail
	// Decrypted is WeChat Pay's decrypted resource (show_decrypted).
	Decrypted *prettyBody
	Answer    *answerDetail
	// CanRedeliver: the journal holds the whole notification and the key
	// is not at the backend now.
	CanRedeliver bool
	Why          string // why not
	// AlreadyRan, for an answered key, says its backend ran it (when, the
	// status): its redelivery asks the operator to confirm a second run.
	AlreadyRan string
	// Route is the handler that took the notification; Async that it
	// acked the platform, AsyncNote what its state means.
	Route     string
	Async     bool
	AsyncNote string
	// Signature says what a redelivery carries.
	Signature string
	// SignatureFrom is when the platform's signature stops being accepted.
	SignatureFrom time.Time
}

type event struct {
	At       time.Time
	What     string
	Status   int
	Duration time.Duration
	Outcome  string
	Error    string // why the attempt failed, in words
	Resigned bool
	Body     *prettyBody // a failure's answer
	Open     bool        // the last failure's answer is shown unfolded
}

type notificationDetail struct {
	Method, URI, Host string
	OrigURI           string // as the platform sent it, when a rewrite changed it
	Header            []headerRow
	Body              prettyBody
}

type answerDetail struct {
	Status int
	Header []headerRow
	Body   prettyBody
	Cached bool
}

type headerRow struct{ Name, Value string }

func newKeyDetail(ap *app.App, storeID string, rec *store.Record, st admin.KeyState, now time.Time) *keyDetail {
	d := &keyDetail{keyRow: newKeyRow(ap, storeID, rec, st, now), LastSeen: rec.LastSeen, ExpiresAt: rec.ExpiresAt,
		CopyOutcomes: rec.CopyOutcomes, Conflicts: rec.Conflicts}
	if order, event := store.OrderOf(rec.Key); event != "" {
		d.Order, d.Event = order, event
	}
	d.Timeline = append(d.Timeline, event{At: rec.FirstSeen, What: "first copy received"})
	hidden := rec.AttemptCount - int64(len(rec.Attempts))
	if hidden > 0 {
		d.Timeline = append(d.Timeline, event{At: rec.FirstSeen, What: fmt.Sprintf("%d older attempts not kept", hidden)})
	}
	for i, a := range rec.Attempts {
		e := event{At: a.Start, What: "attempt " + strconv.FormatInt(hidden+int64(i)+1, 10), Status: a.Status,
			Duration: a.Duration, Outcome: a.Outcome, Error: a.Error, Resigned: a.Resigned}
		if len(a.Body) > 0 {
			b := newPrettyBody(a.Body, int64(len(a.Body)), "")
			e.Body = &b
		}
		d.Timeline = append(d.Timeline, e)
	}
	if rec.Copies > 1 {
		d.Timeline = append(d.Timeline, event{At: rec.LastSeen, What: "last copy received (copy " + strconv.FormatInt(rec.Copies, 10) + ")"})
	}
	// Attempts are kept to the millisecond: order at that precision, so
	// the first copy stays ahead of its own attempt.
	for i := len(d.Timeline) - 1; i >= 0; i-- {
		if d.Timeline[i].Body != nil {
			d.Timeline[i].Open = true
			break
		}
	}
	slices.SortStableFunc(d.Timeline, func(a, b event) int {
		return a.At.Truncate(time.Millisecond).Compare(b.At.Truncate(time.Millisecond))
	})
	if n := rec.Notification; n != nil {
		nd := &notificationDetail{Method: n.Method, URI: n.URI, OrigURI: n.OrigURI, Host: n.Host, Header: headerRows(n.Header)}
		d.Route = n.Route
		nd.Body = newPrettyBody(n.Body, n.BodySize, n.Header.Get("Content-Type"))
		d.Notification = nd
	}
	if rec.State == store.StateAnswered {
		d.Answer = &answerDetail{Status: rec.Status, Header: headerRows(rec.Header), Cached: rec.BodyCached}
		if rec.BodyCached {
			d.Answer.Body = newPrettyBody(rec.Body, int64(len(rec.Body)), rec.Header.Get("Content-Type"))
		}
	}
	d.Async = st.Async
	var next *time.Time
	if !st.NextAttempt.IsZero() {
		next = &st.NextAttempt
	}
	if st.Async {
		stopped := ""
		if n := len(rec.Attempts); rec.Dead && n > 0 {
			stopped = rec.Attempts[n-1].Error
		}
		d.AsyncNote = asyncNote(st.State, next, now, stopped)
	}
	if sig := admin.RecordSignature(ap, rec); sig != nil {
		d.Signature = sig.Note
		if sig.RefusedAfter != nil {
			d.SignatureFrom = *sig.RefusedAfter
		}
	}
	switch n := rec.Notification; {
	case st.Async && rec.State == store.StateInFlight:
		d.Why = "the gateway delivers it itself (" + st.State + ")"
	case rec.State == store.StateInFlight:
		d.Why = "in flight: its first copy is at the backend now"
	case n == nil:
		d.Why = "no notification was journaled (journal_body off?): ask the platform to resend"
	case n.Truncated():
		d.Why = "only part of the notification was journaled (journal_body): a redelivery would not be the platform's bytes"
	default:
		d.CanRedeliver = true
	}
	if rec.State == store.StateAnswered && !rec.FromOrder {
		d.AlreadyRan = admin.AlreadyRan(rec)
	}
	return d
}

// secretHeaders are never shown: credentials, not notification content.
// The journal drops the request's own; this also covers answers and
// whatever a platform names a token.
var secretHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key"}

func isSecretHeader(name string) bool {
	name = http.CanonicalHeaderKey(name)
	if slices.Contains(secretHeaders, name) {
		return true
	}
	l := strings.ToLower(name)
	return strings.Contains(l, "secret") || strings.Contains(l, "token") || strings.Contains(l, "password")
}

func headerRows(h http.Header) []headerRow {
	var rows []headerRow
	for name, vals := range h {
		for _, v := range vals {
			if isSecretHeader(name) {
				v = "(hidden)"
			}
			rows = append(rows, headerRow{Name: name, Value: v})
		}
	}
	slices.SortStableFunc(rows, func(a, b headerRow) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// prettyBody is a body shown by its format.
type prettyBody struct {
	Format    string // JSON, form, XML, text, binary, empty
	Text      string // JSON and XML indented; text as is
	Fields    []headerRow
	Size      int64
	Truncated bool
}

// newPrettyBody formats b (of a body of size bytes) by its Content-Type,
// or by its first byte when there is none. A body that does not parse
// (cut by journal_body, or malformed) is shown as text.
func newPrettyBody(b []byte, size int64, ctype string) prettyBody {
	p := prettyBody{Size: size, Truncated: int64(len(b)) < size}
	if len(b) == 0 {
		p.Format = "empty"
		return p
	}
	mt, _, _ := mime.ParseMediaType(ctype)
	trimmed := bytes.TrimSpace(b)
	isJSON := strings.HasSuffix(mt, "json") || (mt == "" && len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '['))
	isXML := strings.HasSuffix(mt, "xml") || (mt == "" && len(trimmed) > 0 && trimmed[0] == '<')
	isForm := mt == "application/x-www-form-urlencoded"
	switch {
	case isJSON:
		var out bytes.Buffer
		if json.Indent(&out, trimmed, "", "  ") == nil {
			p.Format, p.Text = "JSON", out.String()
			return p
		}
	case isXML:
		if s, ok := indentXML(trimmed); ok {
			p.Format, p.Text = "XML", s
			return p
		}
	case isForm:
		if vals, ok := formFields(string(trimmed)); ok {
			p.Format, p.Fields = "form", vals
			return p
		}
	}
	if !utf8.Valid(b) {
		p.Format = "binary"
		return p
	}
	p.Format, p.Text = "text", string(b)
	return p
}

// formFields keeps the form's order, which url.ParseQuery loses.
func formFields(s string) ([]headerRow, bool) {
	var rows []headerRow
	for part := range strings.SplitSeq(s, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		ku, err1 := url.QueryUnescape(k)
		vu, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return nil, false
		}
		rows = append(rows, headerRow{Name: ku, Value: vu})
	}
	return rows, len(rows) > 0
}

// indentXML re-encodes an XML document indented; false when it does not
// parse.
func indentXML(b []byte) (string, bool) {
	dec := xml.NewDecoder(bytes.NewReader(b))
	var out bytes.Buffer
	enc := xml.NewEncoder(&out)
	enc.Indent("", "  ")
	for {
		tok, err := dec.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false
		}
		if cd, ok := tok.(xml.CharData); ok && len(bytes.TrimSpace(cd)) == 0 {
			continue
		}
		if err := enc.EncodeToken(xml.CopyToken(tok)); err != nil {
			return "", false
		}
	}
	if err := enc.Flush(); err != nil {
		return "", false
	}
	return out.String(), true
}

// chart is the overview's stacked bars, computed here so the template only
// draws rectangles.
type chart struct {
	W, H, Top int
	Max       uint64
	Total     uint64
	Bars      []bar
	Legend    []legendItem
	Labels    []axisLabel
}

type bar struct {
	Title string
	Rects []rect
}

type rect struct {
	X, Y, W, H int
	Class      string
}

type legendItem struct {
	Class, Name string
	Count       uint64
}

type axisLabel struct {
	X    int
	Text string
}

// outcomeGroups fold the outcomes into the chart's six colours.
var outcomeGroups = []struct {
	class, name string
	outcomes    []app.Outcome
}{
	{"forwarded", "forwarded", []app.Outcome{app.Forwarded, app.Passed}},
	// deliver async: acknowledged to the platform, not (yet) delivered —
	// counted apart from forwards, so an outage of the backend behind an
	// async route does not read as traffic reaching it.
	{"acked", "acked (async)", []app.Outcome{app.Queued, app.Acked}},
	{"replayed", "replayed", []app.Outcome{app.Replayed, app.Waited}},
	{"failed", "backend failed", []app.Outcome{app.BackendFailed, app.BackendUnreachable, app.Ambiguous, app.Canceled}},
	{"refused", "refused", []app.Outcome{app.InFlight, app.Conflict, app.RejectedSignature, app.RejectedMerchant, app.BadRequest, app.TooLarge}},
	{"storeerr", "store error", []app.Outcome{app.StoreError}},
}

func newChart(rows []app.MinuteRow) chart {
	const barW, gap, plotH, top = 28, 6, 110, 16
	c := chart{W: len(rows)*(barW+gap) + gap, H: plotH + top + 18, Top: top}
	sums := make([][]uint64, len(rows))
	for i, row := range rows {
		sums[i] = make([]uint64, len(outcomeGroups))
		var tot uint64
		for g, grp := range outcomeGroups {
			for _, o := range grp.outcomes {
				sums[i][g] += row.Counts[o.Index()]
			}
			tot += sums[i][g]
		}
		c.Max = max(c.Max, tot)
		c.Total += tot
	}
	for g, grp := range outcomeGroups {
		var n uint64
		for i := range rows {
			n += sums[i][g]
		}
		c.Legend = append(c.Legend, legendItem{Class: grp.class, Name: grp.name, Count: n})
	}
	scale := 1.0
	if c.Max > 0 {
		scale = float64(plotH) / float64(c.Max)
	}
	for i, row := range rows {
		x := gap + i*(barW+gap)
		y := top + plotH
		// The column's hit area comes first, so the bar's title shows on
		// hover even over an empty minute.
		b := bar{Rects: []rect{{X: x, Y: top, W: barW, H: plotH, Class: "hit"}}}
		var parts []string
		for g, grp := range outcomeGroups {
			n := sums[i][g]
			if n == 0 {
				continue
			}
			h := max(1, int(float64(n)*scale+0.5))
			y -= h
			b.Rects = append(b.Rects, rect{X: x, Y: y, W: barW, H: h, Class: grp.class})
			parts = append(parts, fmt.Sprintf("%s %d", grp.name, n))
		}
		b.Title = row.Start.UTC().Format("15:04") + " UTC: "
		if len(parts) == 0 {
			b.Title += "no requests"
		} else {
			b.Title += strings.Join(parts, ", ")
		}
		c.Bars = append(c.Bars, b)
		if i%5 == 0 || i == len(rows)-1 {
			label := fmt.Sprintf("-%dm", len(rows)-1-i)
			if i == len(rows)-1 {
				label = "now"
			}
			c.Labels = append(c.Labels, axisLabel{X: x + barW/2, Text: label})
		}
	}
	return c
}

// ago is a short age: 42s, 5m, 3h, 2d.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

// stamp is t in UTC as "date time", each half kept on one line (class ts):
// a narrow table cell may break a timestamp at the space, never inside
// the date or the time.
func stamp(t time.Time, clock string) template.HTML {
	t = t.UTC()
	return template.HTML(`<time datetime="` + t.Format(time.RFC3339Nano) + `"><span class="ts">` +
		t.Format("2006-01-02") + `</span> <span class="ts">` + t.Format(clock) + `</span></time>`)
}
