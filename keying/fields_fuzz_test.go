package keying

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/platformtest"
)

func FuzzFieldsJSON(f *testing.F) {
	f.Add([]byte(`{"data":{"object":{"id":"pi_1"}},"items":[{"id":1}]}`), "data.object.id")
	f.Add([]byte(`{"a":1} {"a":2}`), "a")
	f.Add([]byte(`[1,2,3]`), "1")
	f.Add([]byte(`{"a":null,"b":true,"c":1e999}`), "c")
	f.Add([]byte(`"\ud800"`), "")
	f.Add([]byte(strings.Repeat("[", 200)), "0.0.0")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		fl := NewFields(&Request{Method: http.MethodPost, Body: body})
		v, ok, err := fl.JSON(path)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		// Deterministic: a second read gives the same answer.
		v2, ok2, err2 := fl.JSON(path)
		if v != v2 || ok != ok2 || err2 != nil {
			t.Fatal("second read differs")
		}
		if !ok && v != "" {
			t.Fatal("value for a missing path")
		}
	})
}

func FuzzFieldsForm(f *testing.F) {
	f.Add([]byte("a=1&b=%E4%BD%A0&c=+x+"), "", "b")
	f.Add([]byte(""), "a=1;b=2", "a")
	f.Add([]byte("a=%zz"), "a=%", "a")
	f.Add([]byte("a=1&a=2"), "", "a")
	f.Fuzz(func(t *testing.T, body []byte, query, field string) {
		for _, m := range []string{http.MethodPost, http.MethodGet} {
			fl := NewFields(&Request{Method: m, URL: &url.URL{RawQuery: query}, Body: body})
			v, ok, err := fl.Form(field)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error does not wrap ErrMalformed: %v", err)
				}
				continue
			}
			if !ok && v != "" {
				t.Fatal("value for a missing field")
			}
		}
		// A nil URL on GET is an empty query, not a panic.
		NewFields(&Request{Method: http.MethodGet, Body: body}).Form(field)
	})
}

func FuzzFieldsXML(f *testing.F) {
	f.Add([]byte(`<xml><return_code><![CDATA[SUCCESS]]></return_code><a><b>c</b></a></xml>`), "return_code")
	f.Add([]byte(`<xml><a>1</a><a>2</a></xml>`), "a")
	f.Add([]byte(`<xml/><xml><a>1</a></xml>`), "a")
	f.Add([]byte(`<?xml version="1.0" encoding="GBK"?><xml><a>1</a></xml>`), "a")
	f.Add([]byte(`<!DOCTYPE x [<!ENTITY e "boom">]><xml><a>&e;</a></xml>`), "a")
	f.Add([]byte(`<xml><a>`+strings.Repeat("<b>", 200)), "a")
	f.Fuzz(func(t *testing.T, body []byte, elem string) {
		fl := NewFields(&Request{Method: http.MethodPost, Body: body})
		v, ok, err := fl.XML(elem)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if !ok && v != "" {
			t.Fatal("value for a missing element")
		}
		m, err := ParseStrictXML(body)
		if err != nil || m[elem] != v {
			t.Fatal("ParseStrictXML disagrees with Fields.XML")
		}
		// On input the strict reader accepts, the lenient one (used for
		// answers) reads the same.
		if l, err := ParseFlatXML(body); err != nil || l[elem] != v {
			t.Fatal("ParseFlatXML disagrees on strict input")
		}
	})
}

func FuzzParseRSAPublicKey(f *testing.F) {
	k, _ := platformtest.Keys(f)
	f.Add(platformtest.PublicKeyPEM(f, &k.PublicKey))
	f.Add(testCert(f, k, bigInt(1), "x"))
	f.Add([]byte("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if k, err := ParseRSAPublicKey(data); err == nil && k == nil {
			t.Fatal("nil key without error")
		}
		if certs, err := ParseCertificates(data); err == nil && len(certs) == 0 {
			t.Fatal("no certificates without error")
		}
	})
}

func TestParseFlatXML(t *testing.T) {
	m, err := ParseFlatXML([]byte(`<xml><a><![CDATA[x<y]]></a><b>1</b><b>2</b><c><d>deep</d>t</c></xml>`))
	if err != nil {
		t.Fatal(err)
	}
	if m["a"] != "x<y" || m["b"] != "1" || m["c"] != "t" {
		t.Fatalf("ParseFlatXML = %v", m)
	}
	if _, ok := m["d"]; ok {
		t.Fatal("deep element read as a child of the root")
	}
	for _, bad := range []string{``, `not xml`, `<xml><a>1</a></xml><xml><a>2</a></xml>`, `<xml><a>1</b></xml>`} {
		if _, err := ParseFlatXML([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseFlatXML(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// jsonAtByDecoding is how Fields.JSON read a path before jsonAt: the whole
// body decoded, then walked.
func jsonAtByDecoding(body []byte, path string) (string, bool, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false, false
	}
	x, ok := JSONPath(v, path)
	if !ok {
		return "", false, true
	}
	return JSONString(x), true, true
}

// FuzzJSONAtSame: the scanner finds what decoding finds, for every body
// and path (names given twice, escapes, invalid UTF-8, nesting, numbers).
func FuzzJSONAtSame(f *testing.F) {
	for _, c := range [][2]string{
		{`{"data":{"object":{"id":"pi_1"}},"items":[{"id":1}]}`, "data.object.id"},
		{`{"id":"a","id":"b"}`, "id"},
		{`{"id":{"x":1},"id":{"y":2}}`, "id.x"},
		{`{"i\u0064":"esc","id":"plain"}`, "id"},
		{`{"id":"plain","i\u0064":"esc"}`, "id"},
		{`{"id":"\ud800\u00e9\n"}`, "id"},
		{"{\"id\":\"\xff\xfe\"}", "id"},
		{"{\"\xffid\":1}", "\ufffdid"},
		{` [ 1 , {"a" : [ true , null , -1.5e+3 ] } ] `, "1.a.2"},
		{`[1,2,3]`, "+1"},
		{`[1,2,3]`, "-0"},
		{`{"a":{"z":1,"b":[2,{"c":"d"}]}}`, "a"},
		{`{"a":null}`, "a"},
		{`{"":{"":5}}`, "."},
		{`{"a":"x\"y\\"}`, "a"},
		{`{}`, "a"},
		{`[]`, "0"},
		{`"top"`, ""},
		{`{"a":1} {"a":2}`, "a"},
		{`{"a":1e999}`, "a"},
	} {
		f.Add([]byte(c[0]), c[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		want, wantOK, valid := jsonAtByDecoding(body, path)
		got, gotOK, err := NewFields(&Request{Method: http.MethodPost, Body: body}).JSON(path)
		if valid != (err == nil) {
			t.Fatalf("body %q: decoding says valid=%v, JSON says %v", body, valid, err)
		}
		if got != want || gotOK != wantOK {
			t.Fatalf("body %q path %q: got %q %v, decoding gives %q %v", body, path, got, gotOK, want, wantOK)
		}
	})
}
