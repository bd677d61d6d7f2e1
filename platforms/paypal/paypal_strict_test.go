package paypal

import (
	"context"
	"errors"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/internal/presettest"
	"github.com/idemgate/idemgate/keying"
)

// Tests of what PayPal's CRC-only signature needs around it: the
// transmission time, certificate validity and the transmission log.

func TestPayPalTransmissionTime(t *testing.T) {
	k, _ := platformtest.Keys(t)
	cert := presettest.Cert(t, k, presettest.BigInt(3), "messageverificationcerts.sandbox.paypal.com")
	cfg := Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, HTTPClient: noNetwork(t)}
	ev := ppEvent("WH-T", "PAYMENT.CAPTURE.COMPLETED", "1")
	at := func(tm time.Time) *keying.Request {
		pp := platformtest.PayPal{Key: k, WebhookID: ppWebhookID}
		return presettest.Post(ev, pp.TransmissionHeader(t, ev, "tx-1", tm))
	}
	cases := []presettest.VerifyCase[Config]{
		{Name: "now", Cfg: cfg, Req: at(presettest.Now), WantErr: nil, Key: "WH-T"},
		{Name: "4m59s old", Cfg: cfg, Req: at(presettest.Now.Add(-5*time.Minute + time.Second)), WantErr: nil, Key: "WH-T"},
		{Name: "5m1s old", Cfg: cfg, Req: at(presettest.Now.Add(-5*time.Minute - time.Second)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "a day old (captured headers replayed)", Cfg: cfg, Req: at(presettest.Now.Add(-24 * time.Hour)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "5m1s ahead", Cfg: cfg, Req: at(presettest.Now.Add(5*time.Minute + time.Second)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "within a configured tolerance", Cfg: Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, Tolerance: 15 * time.Minute}, Req: at(presettest.Now.Add(-10 * time.Minute)), WantErr: nil, Key: "WH-T"},
		{Name: "beyond a configured tolerance", Cfg: Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, Tolerance: time.Minute}, Req: at(presettest.Now.Add(-2 * time.Minute)), WantErr: keying.ErrSignature, Key: ""},
		{Name: "not RFC 3339", Cfg: cfg, Req: presettest.Hdr(at(presettest.Now), "Paypal-Transmission-Time", "Sat Mar 14 09:26:53 2026"), WantErr: keying.ErrSignature, Key: ""},
		{Name: "absurdly long", Cfg: cfg, Req: presettest.Hdr(at(presettest.Now), "Paypal-Transmission-Time", strings.Repeat("9", 100)), WantErr: keying.ErrSignature, Key: ""},
	}
	presettest.RunVerifyCases(t, New, cases, nil)
}

func TestPayPalPinnedCertificateValidity(t *testing.T) {
	k, other := platformtest.Keys(t)
	const cn = "messageverificationcerts.sandbox.paypal.com"
	expired := platformtest.CertificateValid(t, k, presettest.BigInt(4), cn, presettest.Now.Add(-48*time.Hour), presettest.Now.Add(-time.Hour))
	notYet := platformtest.CertificateValid(t, k, presettest.BigInt(5), cn, presettest.Now.Add(time.Hour), presettest.Now.Add(48*time.Hour))
	valid := presettest.Cert(t, k, presettest.BigInt(6), cn)
	otherValid := presettest.Cert(t, other, presettest.BigInt(7), cn)
	ev := ppEvent("WH-P", "PAYMENT.CAPTURE.COMPLETED", "1")
	req := ppReq(t, k, ppWebhookID, "tx", ppCertURL, ev)
	pin := func(certs ...[]byte) Config {
		return Config{WebhookID: ppWebhookID, Certificates: certs, HTTPClient: noNetwork(t)}
	}
	presettest.RunVerifyCases(t, New, []presettest.VerifyCase[Config]{
		{Name: "valid", Cfg: pin(valid), Req: req, WantErr: nil, Key: "WH-P"},
		{Name: "expired", Cfg: pin(expired), Req: req, WantErr: keying.ErrSignature, Key: ""},
		{Name: "not yet valid", Cfg: pin(notYet), Req: req, WantErr: keying.ErrSignature, Key: ""},
		// A renewed certificate pinned beside the old one: the old key
		// no longer verifies once it expires.
		{Name: "expired one of two, the valid one is another key", Cfg: pin(expired, otherValid), Req: req, WantErr: keying.ErrSignature, Key: ""},
		{Name: "expired one of two, the valid one signed", Cfg: pin(expired, valid), Req: req, WantErr: nil, Key: "WH-P"},
	}, nil)
}

// memLog is a TransmissionLog in memory, with an error switch.
type memLog struct {
	mu    sync.Mutex
	seen  map[string]string
	fail  error
	calls int
}

func (l *memLog) Seen(_ context.Context, id, digest string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.fail != nil {
		return false, l.fail
	}
	if l.seen == nil {
		l.seen = map[string]string{}
	}
	if d, ok := l.seen[id]; ok {
		return d != digest, nil
	}
	l.seen[id] = digest
	return false, nil
}

// TestPayPalCRCForgery is the attack of issue 8: a captured delivery's
// headers re-used with another event padded to the same CRC-32. Without the
// transmission log the signature verifies (PayPal signs only the CRC); with
// it, the forgery is refused, whichever copy arrives first.
func TestPayPalCRCForgery(t *testing.T) {
	k, _ := platformtest.Keys(t)
	cert := presettest.Cert(t, k, presettest.BigInt(3), "messageverificationcerts.sandbox.paypal.com")
	genuine := ppEvent("WH-GENUINE", "PAYMENT.CAPTURE.COMPLETED", "CAP-1")
	forged := platformtest.PayPalForgery(t, genuine, []byte(`{"id":"WH-FORGED","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"CAP-ATTACKER","amount":{"currency_code":"USD","value":"9999.00"}},"pad":"`+strings.Repeat("a", 64)+`"}`))
	if crc32.ChecksumIEEE(forged) != crc32.ChecksumIEEE(genuine) {
		t.Fatal("forgery helper broken")
	}
	h := platformtest.PayPal{Key: k, WebhookID: ppWebhookID}.TransmissionHeader(t, genuine, "tx-captured", ppTxTime)

	// Without a log, the forgery verifies: this is the hole.
	p := presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}})
	if n, err := p.Verify(presettest.Post(forged, h)); err != nil || n.Key != "WH-FORGED" {
		t.Fatalf("precondition: forgery should verify on the signature alone: %v", err)
	}

	log := &memLog{}
	p = presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, TransmissionLog: log})
	if _, err := p.Verify(presettest.Post(genuine, h)); err != nil {
		t.Fatalf("genuine: %v", err)
	}
	if _, err := p.Verify(presettest.Post(genuine, h)); err != nil {
		t.Fatalf("genuine again (same transmission, same body): %v", err)
	}
	_, err := p.Verify(presettest.Post(forged, h))
	presettest.WantErr(t, err, keying.ErrSignature)
	if !strings.Contains(err.Error(), "another body") {
		t.Fatalf("reason = %v", err)
	}

	// Forgery first: it takes the transmission id, the genuine copy is
	// refused for that transmission (PayPal's retry comes with a new id).
	log2 := &memLog{}
	p = presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, TransmissionLog: log2})
	if _, err := p.Verify(presettest.Post(forged, h)); err != nil {
		t.Fatal(err)
	}
	_, err = p.Verify(presettest.Post(genuine, h))
	presettest.WantErr(t, err, keying.ErrSignature)
	retry := platformtest.PayPal{Key: k, WebhookID: ppWebhookID}.TransmissionHeader(t, genuine, "tx-retry", ppTxTime)
	if _, err := p.Verify(presettest.Post(genuine, retry)); err != nil {
		t.Fatalf("retry with a new transmission: %v", err)
	}

	// A bad signature never reaches the log; a log error is ErrUnavailable.
	log3 := &memLog{}
	p = presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, Certificates: [][]byte{cert}, TransmissionLog: log3})
	_, err = p.Verify(presettest.Post(genuine, presettest.Hdr(&keying.Request{Header: h}, "Paypal-Transmission-Sig", "AAAA").Header))
	presettest.WantErr(t, err, keying.ErrSignature)
	if log3.calls != 0 {
		t.Fatalf("log consulted %d times for a bad signature", log3.calls)
	}
	log3.fail = errors.New("store down")
	_, err = p.Verify(presettest.Post(genuine, h))
	presettest.WantErr(t, err, keying.ErrUnavailable)
	if errors.Is(err, keying.ErrSignature) {
		t.Fatal("a log error must not read as a forgery")
	}
}

// slowCertServer serves a PayPal certificate bundle at every path; paths
// starting with /slow wait for release (or the client to give up).
type slowCertServer struct {
	*httptest.Server
	bundle  []byte
	release chan struct{}
	hits    atomic.Int32
	entered chan string
}

func newSlowCertServer(t *testing.T, bundle []byte) *slowCertServer {
	s := &slowCertServer{bundle: bundle, release: make(chan struct{}), entered: make(chan string, 64)}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.entered <- r.URL.Path
		if strings.HasPrefix(r.URL.Path, "/slow") {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Write(s.bundle)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestPayPalFetchConcurrency(t *testing.T) {
	k, other := platformtest.Keys(t)
	root := platformtest.NewCA(t, other, "Test Root CA")
	bundle := root.Issue(t, k, presettest.BigInt(21), "messageverificationcerts.paypal.com", presettest.Now.Add(-time.Hour), presettest.Now.Add(time.Hour))
	ev := ppEvent("WH-C", "PAYMENT.CAPTURE.COMPLETED", "1")
	newP := func(s *slowCertServer) *PayPal {
		u, _ := url.Parse(s.URL)
		p := presettest.MustNew(t, New, Config{WebhookID: ppWebhookID, HTTPClient: s.Client(), Roots: root.Pool()}).(*PayPal)
		p.certURLOK = func(v *url.URL) bool { return v.Host == u.Host }
		return p
	}
	withCtx := func(r *keying.Request, ctx context.Context) *keying.Request { r.Context = ctx; return r }

	t.Run("one fetch for many concurrent requests", func(t *testing.T) {
		s := newSlowCertServer(t, bundle)
		p := newP(s)
		const n = 8
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", s.URL+"/slow/CERT-1", ev))
				errs <- err
			}()
		}
		<-s.entered // the one fetch is under way; the others wait for it
		close(s.release)
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if h := s.hits.Load(); h != 1 {
			t.Fatalf("%d fetches for one URL, want 1", h)
		}
	})

	t.Run("a slow URL does not hold another", func(t *testing.T) {
		s := newSlowCertServer(t, bundle)
		defer close(s.release)
		p := newP(s)
		slowDone := make(chan error, 1)
		go func() {
			_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", s.URL+"/slow/CERT-2", ev))
			slowDone <- err
		}()
		<-s.entered
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := p.Verify(withCtx(ppReq(t, k, ppWebhookID, "tx", s.URL+"/fast/CERT-3", ev), ctx)); err != nil {
			t.Fatalf("fast URL while a slow one is fetched: %v", err)
		}
		select {
		case err := <-slowDone:
			t.Fatalf("slow fetch finished before release: %v", err)
		default:
		}
	})

	t.Run("a waiter gives up with its own context; the fetch goes on", func(t *testing.T) {
		s := newSlowCertServer(t, bundle)
		p := newP(s)
		u := s.URL + "/slow/CERT-4"
		first := make(chan error, 1)
		go func() {
			_, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", u, ev))
			first <- err
		}()
		<-s.entered
		ctx, cancel := context.WithCancel(context.Background())
		waiter := make(chan error, 1)
		go func() {
			_, err := p.Verify(withCtx(ppReq(t, k, ppWebhookID, "tx", u, ev), ctx))
			waiter <- err
		}()
		cancel()
		if err := <-waiter; !errors.Is(err, keying.ErrSignature) {
			t.Fatalf("cancelled waiter: %v", err)
		}
		close(s.release)
		if err := <-first; err != nil {
			t.Fatalf("fetching request: %v", err)
		}
		if h := s.hits.Load(); h != 1 {
			t.Fatalf("%d fetches, want 1", h)
		}
	})

	t.Run("the fetching request gives up; the next one fetches again", func(t *testing.T) {
		s := newSlowCertServer(t, bundle)
		p := newP(s)
		u := s.URL + "/slow/CERT-5"
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := p.Verify(withCtx(ppReq(t, k, ppWebhookID, "tx", u, ev), ctx))
			first <- err
		}()
		<-s.entered
		cancel()
		if err := <-first; !errors.Is(err, keying.ErrSignature) {
			t.Fatalf("cancelled fetch: %v", err)
		}
		close(s.release)
		if _, err := p.Verify(ppReq(t, k, ppWebhookID, "tx", u, ev)); err != nil {
			t.Fatalf("after an abandoned fetch: %v", err)
		}
		if h := s.hits.Load(); h != 2 {
			t.Fatalf("%d fetches, want 2 (the abandoned one is not cached)", h)
		}
	})
}
