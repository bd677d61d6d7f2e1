// Package legacy is a stand-in for an unmodified merchant backend: it runs its
// business logic ("renew the subscription") on every payment notification it
// receives, with no idempotency check of its own. Each duplicate that reaches
// it renews the order again — exactly the double renewal idemgate prevents.
//
// Routes:
//
//	POST /notify  the platform's asynchronous notification; renews the order and
//	              answers "success" (text/plain, 200), or "fail" (500) in failure mode;
//	              an XML body (WeChat Pay v2) is answered in XML, return_code SUCCESS or FAIL
//	GET  /return  the browser's synchronous return; a legacy backend runs the same
//	              business logic here too, then shows an HTML payment result page
//	              (with Config.ReturnPage: the page only, as Alipay asks merchants)
//	GET  /stats   {"renewals": {"<order>": n, ...}, "total": n, "failed": n}
//	POST /reset   forget all counters and restore the FailFirst budget
//
// The order id comes from the form field (or query parameter) out_trade_no or
// order_id, a JSON body's order_id (or out_trade_no, data.order_id, or else
// the event's id), or an XML body's out_trade_no or order_id.
package legacy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html/template"
	"io"
	"log"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// maxBody bounds what the backend reads from one notification.
const maxBody = 1 << 20

// FailPrefix marks order ids that always fail: a notification for
// "fail-123" is answered "fail" with 500 and never renews anything.
const FailPrefix = "fail-"

// Config tunes the stand-in backend.
type Config struct {
	// Delay is how long each renewal takes before the backend answers,
	// to simulate a slow backend while duplicates arrive. Zero answers at once.
	Delay time.Duration

	// FailFirst makes the first FailFirst renewal attempts (across all orders)
	// answer failure without renewing, so a retry can be shown to go through.
	FailFirst int

	// ReturnPage makes GET /return show the result page only, the
	// business running on the notify alone, as Alipay's documentation asks
	// merchants (an Alipay route in front of it says `return display`).
	// By default the return renews too, as many legacy backends do
	// (`return business`).
	ReturnPage bool

	// Log receives one line per renewal or failure. Nil means os.Stdout;
	// io.Discard silences it (load tests).
	Log io.Writer
}

// Backend is the legacy merchant backend. The zero value is not usable;
// call New. It is safe for concurrent use.
type Backend struct {
	cfg Config
	log *log.Logger
	mux *http.ServeMux

	mu        sync.Mutex
	renewals  map[string]int
	total     int
	failed    int
	failsLeft int
}

// New returns a backend configured by cfg.
func New(cfg Config) *Backend {
	out := cfg.Log
	if out == nil {
		out = os.Stdout
	}
	b := &Backend{
		cfg:       cfg,
		log:       log.New(out, "legacy-backend: ", log.Ltime|log.Lmicroseconds),
		renewals:  make(map[string]int),
		failsLeft: cfg.FailFirst,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notify", b.notify)
	mux.HandleFunc("GET /return", b.paymentReturn)
	mux.HandleFunc("GET /stats", b.stats)
	mux.HandleFunc("POST /reset", b.reset)
	b.mux = mux
	return b
}

// ServeHTTP routes a request to the backend's endpoints.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mux.ServeHTTP(w, r)
}

// Stats is the answer of GET /stats.
type Stats struct {
	Renewals map[string]int `json:"renewals"`
	Total    int            `json:"total"`
	Failed   int            `json:"failed"`
}

// Stats returns a snapshot of the counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{Renewals: make(map[string]int, len(b.renewals)), Total: b.total, Failed: b.failed}
	for k, v := range b.renewals {
		s.Renewals[k] = v
	}
	return s
}

// Renewals returns how many times order has been renewed.
func (b *Backend) Renewals(order string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renewals[order]
}

// Reset forgets all counters and restores the FailFirst budget.
func (b *Backend) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.renewals)
	b.total, b.failed, b.failsLeft = 0, 0, b.cfg.FailFirst
}

func (b *Backend) notify(w http.ResponseWriter, r *http.Request) {
	order, isXML, err := orderID(w, r)
	if err != nil {
		if isXML {
			answerXML(w, http.StatusBadRequest, "FAIL", err.Error())
		} else {
			http.Error(w, "fail: "+err.Error(), http.StatusBadRequest)
		}
		return
	}
	ok := b.renew(r, order)
	switch {
	case isXML && ok:
		answerXML(w, http.StatusOK, "SUCCESS", "OK")
	case isXML:
		answerXML(w, http.StatusInternalServerError, "FAIL", "renewal failed")
	case ok:
		// Alipay reads this exact body as "stop retrying"; anything else
		// (and any 5xx, for every platform) makes it retry.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "success")
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "fail")
	}
}

// answerXML answers the way WeChat Pay v2 expects: return_code SUCCESS stops
// its retries, FAIL does not.
func answerXML(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<xml><return_code><![CDATA[%s]]></return_code><return_msg><![CDATA[%s]]></return_msg></xml>", code, msg)
}

var resultPage = template.Must(template.New("return").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Payment result</title></head>
<body><h1>{{if .OK}}Payment received{{else}}Payment not confirmed{{end}}</h1>
<p>Order <code>{{.Order}}</code>: {{if .OK}}your subscription has been renewed. Thank you!{{else}}please try again later.{{end}}</p>
</body></html>
`))

// paymentReturn is where the browser lands after paying. Like many legacy
// backends, it runs the same business logic as the notification, which is
// why the browser return racing the notify renews twice without a gateway;
// with Config.ReturnPage it only shows the page.
func (b *Backend) paymentReturn(w http.ResponseWriter, r *http.Request) {
	order, _, err := orderID(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ok := true
	if b.cfg.ReturnPage {
		b.log.Printf("showed the result page of order %s (the notify renews)", order)
	} else {
		ok = b.renew(r, order)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
	}
	resultPage.Execute(w, struct {
		Order string
		OK    bool
	}{order, ok})
}

// renew runs the business logic once, reporting whether it succeeded.
// The counter moves before the delay: a slow backend has already renewed
// by the time its caller gives up waiting, as in real life.
func (b *Backend) renew(r *http.Request, order string) bool {
	b.mu.Lock()
	fail := strings.HasPrefix(order, FailPrefix) || b.failsLeft > 0
	var n int
	if fail {
		if b.failsLeft > 0 {
			b.failsLeft--
		}
		b.failed++
		n = b.failed
	} else {
		b.renewals[order]++
		b.total++
		n = b.renewals[order]
	}
	b.mu.Unlock()

	if fail {
		b.log.Printf("FAILED to renew order %s (failure #%d, on purpose)", order, n)
	} else {
		b.log.Printf("renewed order %s (time #%d)", order, n)
	}
	if b.cfg.Delay > 0 {
		t := time.NewTimer(b.cfg.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
	}
	return !fail
}

func (b *Backend) stats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(b.Stats())
}

func (b *Backend) reset(w http.ResponseWriter, r *http.Request) {
	b.Reset()
	b.log.Printf("counters reset")
	w.WriteHeader(http.StatusNoContent)
}

// orderID finds the order id in the query, a form, JSON or XML body, and
// tells whether the body was XML (to be answered in XML).
func orderID(w http.ResponseWriter, r *http.Request) (order string, isXML bool, err error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return "", false, fmt.Errorf("reading body: %v", err)
	}
	fields := r.URL.Query()
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		(mt == "" && bytes.HasPrefix(trimmed, []byte("{"))):
		var v struct {
			OrderID    any `json:"order_id"`
			OutTradeNo any `json:"out_trade_no"`
			ID         any `json:"id"` // a webhook event's id, when nothing better
			// Standard Webhooks payloads carry theirs under data.
			Data struct {
				OrderID any `json:"order_id"`
			} `json:"data"`
		}
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber() // keep long numeric ids exactly as sent
		if err := dec.Decode(&v); err != nil {
			return "", false, fmt.Errorf("body is not JSON: %v", err)
		}
		for _, id := range []any{v.OrderID, v.OutTradeNo, v.Data.OrderID, v.ID} {
			switch id := id.(type) {
			case string:
				if id != "" {
					return id, false, nil
				}
			case json.Number:
				return id.String(), false, nil
			}
		}
	case mt == "text/xml" || mt == "application/xml" ||
		(mt == "" && bytes.HasPrefix(trimmed, []byte("<"))):
		var v struct {
			OutTradeNo string `xml:"out_trade_no"`
			OrderID    string `xml:"order_id"`
			// A WeChat Pay v2 refund hides its order in req_info,
			// encrypted with the merchant's key this stand-in does not
			// hold: the ciphertext's digest names the refund instead.
			ReqInfo string `xml:"req_info"`
		}
		if err := xml.Unmarshal(trimmed, &v); err != nil {
			return "", true, fmt.Errorf("body is not XML: %v", err)
		}
		for _, id := range []string{v.OutTradeNo, v.OrderID} {
			if id = strings.TrimSpace(id); id != "" {
				return id, true, nil
			}
		}
		if ri := strings.TrimSpace(v.ReqInfo); ri != "" {
			sum := sha256.Sum256([]byte(ri))
			return "refund-" + hex.EncodeToString(sum[:6]), true, nil
		}
		return "", true, fmt.Errorf("no order id (out_trade_no or order_id)")
	case len(trimmed) > 0:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return "", false, fmt.Errorf("body is not a form: %v", err)
		}
		for k, vs := range form {
			fields[k] = append(vs, fields[k]...)
		}
	}
	for _, name := range []string{"out_trade_no", "order_id"} {
		if id := fields.Get(name); id != "" {
			return id, false, nil
		}
	}
	return "", false, fmt.Errorf("no order id (out_trade_no or order_id)")
}
