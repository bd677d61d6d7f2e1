// Package presettest holds what every platform package's tests share:
// the fixed clock, request builders, and the table runners for Verify and
// Success. The notifications themselves are signed by internal/platformtest,
// independently of the code under test. Only tests import it.
package presettest

import (
	"bufio"
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/platformtest"
	"github.com/idemgate/idemgate/keying"
)

// Now is the fixed clock of the tests.
var Now = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// Cert is a self-signed certificate for k with the given serial, valid
// around Now.
func Cert(t testing.TB, k *rsa.PrivateKey, serial *big.Int, cn string) []byte {
	t.Helper()
	return platformtest.CertificateValid(t, k, serial, cn, Now.Add(-24*time.Hour), Now.Add(365*24*time.Hour))
}

// BigInt is n as a *big.Int.
func BigInt(n int64) *big.Int { return big.NewInt(n) }

// Post is a notification POST with body and header h, judged at Now.
func Post(body []byte, h http.Header) *keying.Request {
	return &keying.Request{Method: http.MethodPost, Header: h, Body: body, Now: Now}
}

// Hdr is a copy of r with the headers kv (name, value, …) set; an empty
// value deletes the header.
func Hdr(r *keying.Request, kv ...string) *keying.Request {
	c := *r
	c.Header = r.Header.Clone()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			c.Header.Del(kv[i])
		} else {
			c.Header.Set(kv[i], kv[i+1])
		}
	}
	return &c
}

// WithBody is a copy of r with another body.
func WithBody(r *keying.Request, body []byte) *keying.Request {
	c := *r
	c.Body = body
	return &c
}

// Append appends extra to r's body in place.
func Append(r *keying.Request, extra string) *keying.Request {
	r.Body = append(r.Body, extra...)
	return r
}

// New is a platform's constructor: its package's New, from its own
// Config.
type New[C any] func(cfg C) (keying.Platform, error)

// MustNew is the platform newp builds from cfg.
func MustNew[C any](t testing.TB, newp New[C], cfg C) keying.Platform {
	t.Helper()
	pl, err := newp(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return pl
}

// WantErr checks err against want (nil: success).
func WantErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want one wrapping %v", err, want)
	}
}

// IsSigOrMalformed tells whether err is one of the request errors
// (ErrSignature, ErrMalformed, ErrMerchant).
func IsSigOrMalformed(err error) bool {
	return errors.Is(err, keying.ErrSignature) || errors.Is(err, keying.ErrMalformed) || errors.Is(err, keying.ErrMerchant)
}

// VerifyCase is a row of a preset's Verify table: Req either fails with
// an error wrapping WantErr or, WantErr nil, verifies with Key. C is the
// platform's Config.
type VerifyCase[C any] struct {
	Name    string
	Cfg     C
	Req     *keying.Request
	WantErr error
	Key     string
}

// Verifies runs the platform newp builds from cfg on req and checks the
// outcome: an error wrapping want or, want nil, success with key. It
// returns the notification when req verified, nil when it failed as it
// should.
func Verifies[C any](t *testing.T, newp New[C], cfg C, req *keying.Request, want error, key string) *keying.Notification {
	t.Helper()
	n, err := MustNew(t, newp, cfg).Verify(req)
	WantErr(t, err, want)
	if err != nil {
		return nil
	}
	if n.Key != key {
		t.Fatalf("Key = %q, want %q", n.Key, key)
	}
	return n
}

// RunVerifyCases runs each case as a subtest with Verifies; check, if not
// nil, then looks at the notification of each case that verified.
func RunVerifyCases[C any](t *testing.T, newp New[C], cases []VerifyCase[C], check func(t *testing.T, c VerifyCase[C], n *keying.Notification)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if n := Verifies(t, newp, c.Cfg, c.Req, c.WantErr, c.Key); n != nil && check != nil {
				check(t, c, n)
			}
		})
	}
}

// SuccessCase is a backend answer and whether Success must take it as
// "handled".
type SuccessCase struct {
	Status int
	Body   string
	Want   bool
}

// CheckSuccess asks p.Success about each case, with header h.
func CheckSuccess(t *testing.T, p keying.Platform, h http.Header, cases []SuccessCase) {
	t.Helper()
	for _, c := range cases {
		if got := p.Success(c.Status, h, []byte(c.Body)); got != c.Want {
			t.Errorf("Success(%d, %q) = %v, want %v", c.Status, c.Body, got, c.Want)
		}
	}
}

// FuzzVerify verifies r with each of ps: a failure must wrap ErrSignature,
// ErrMalformed or ErrMerchant, and check (if not nil) looks at each success.
func FuzzVerify(t *testing.T, r *keying.Request, check func(n *keying.Notification), ps ...keying.Platform) {
	t.Helper()
	for _, p := range ps {
		n, err := p.Verify(r)
		if err != nil {
			if !IsSigOrMalformed(err) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			continue
		}
		if check != nil {
			check(n)
		}
	}
}

// ConcurrentVerify runs p on req from several goroutines at once
// (meaningful under -race): a Platform is shared by all requests of a
// route.
func ConcurrentVerify(t *testing.T, p keying.Platform, req *keying.Request) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			n, err := p.Verify(req)
			if err == nil && n.Extra != nil {
				n.Extra("x")
			}
			if err == nil {
				_, _, err = n.Fields.JSON("id")
				if errors.Is(err, keying.ErrMalformed) {
					err = nil // not every body is JSON
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("%s: %v", p.Name(), err)
		}
	}
}

// ReadTestdata reads a sample of Testdata.
func ReadTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(Testdata + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// HeaderFile reads "Name: value" lines of a sample of Testdata.
func HeaderFile(t *testing.T, name string) http.Header {
	t.Helper()
	h := http.Header{}
	sc := bufio.NewScanner(bytes.NewReader(ReadTestdata(t, name)))
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok {
			h.Set(k, v)
		}
	}
	return h
}

// Testdata is where the platforms' own signed samples are, seen from a
// platform package's folder: keying/testdata, which the store's and the
// handler's benchmarks read too.
const Testdata = "../../keying/testdata/"

// OtherXMLReading reads a flat document the way a backend's XML binding
// does (encoding/xml's Unmarshal with ",any"), independently of
// keying.ParseStrictXML.
func OtherXMLReading(body []byte) ([][2]string, error) {
	var doc struct {
		Fields []struct {
			XMLName xml.Name
			Value   string `xml:",chardata"`
		} `xml:",any"`
	}
	if err := xml.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	out := make([][2]string, len(doc.Fields))
	for i, f := range doc.Fields {
		out[i] = [2]string{f.XMLName.Local, f.Value}
	}
	return out, nil
}

// PoolOf is a pool of certs.
func PoolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// KnownEvent tells whether ev is a business event keying.SplitOrder
// reads back.
func KnownEvent(ev string) bool {
	_, got, ok := keying.SplitOrder("s:m:o:" + ev)
	return ok && got == ev
}
