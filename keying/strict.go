package keying

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Strict readers for the presets whose signature covers parsed fields
// rather than raw bytes (Alipay, WeChat Pay v2). The signature is checked
// over what these readers return, and the backend parses the raw bytes
// with a parser of its own: any input two common parsers could read
// differently is refused, so what the backend acts on is what was verified.

// ErrAmbiguous is wrapped by the strict readers when the input could be
// read in more than one way (a repeated field, an element where a value
// belongs, a DOCTYPE, text outside the root…). The presets turn it into
// ErrSignature: such input cannot be said to carry the signed values.
var ErrAmbiguous = errors.New("ambiguous input")

func ambiguous(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrAmbiguous, fmt.Sprintf(format, args...))
}

// maxStrictFields bounds the fields read from one notification.
const maxStrictFields = 256

// ParseStrictXML reads a flat XML document, <root><name>value</name>…</root>,
// as name → value, refusing (with ErrAmbiguous) anything a backend's XML
// parser could read differently from this map:
//   - a processing instruction other than the XML declaration at the very
//     start, a DOCTYPE or any other directive (entities), a comment;
//   - non-blank text outside the root or directly inside it, a second root;
//   - an element inside a field (where a value belongs), a field whose
//     value is split in pieces (text and CDATA mixed, two CDATA sections);
//   - a field name given twice;
//   - attributes and namespace prefixes (xmlns included).
//
// Syntax errors wrap ErrMalformed.
func ParseStrictXML(body []byte) (map[string]string, error) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	dec.Strict = true
	out := map[string]string{}
	depth := 0
	sawRoot := false
	first := true
	var name string
	var text []byte
	pieces := 0
	// Text outside the root is ambiguous in a document, but a body with
	// no root at all is simply not XML: decide at the end.
	var outside error
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: body is not XML: %v", ErrMalformed, err)
		}
		isFirst := first
		first = false
		switch t := tok.(type) {
		case xml.ProcInst:
			// The declaration may only open the document (Go's decoder
			// already refuses it anywhere else, this keeps that explicit).
			if t.Target != "xml" || !isFirst || !bytes.HasPrefix(body, []byte("<?xml")) {
				return nil, ambiguous("processing instruction <?%s?>", Clip(t.Target))
			}
		case xml.Directive:
			return nil, ambiguous("DOCTYPE or other <!…> directive")
		case xml.Comment:
			return nil, ambiguous("comment")
		case xml.StartElement:
			if t.Name.Space != "" || strings.Contains(t.Name.Local, ":") {
				return nil, ambiguous("namespaced element %s", Clip(t.Name.Local))
			}
			if len(t.Attr) > 0 {
				return nil, ambiguous("attribute on element %s", Clip(t.Name.Local))
			}
			depth++
			switch depth {
			case 1:
				if sawRoot {
					return nil, ambiguous("a second root element")
				}
				sawRoot = true
			case 2:
				name, text, pieces = t.Name.Local, text[:0], 0
				if _, dup := out[name]; dup {
					return nil, ambiguous("field %s given twice", Clip(name))
				}
				if len(out) >= maxStrictFields {
					return nil, ambiguous("more than %d fields", maxStrictFields)
				}
			default:
				return nil, ambiguous("element inside field %s", Clip(name))
			}
		case xml.CharData:
			switch depth {
			case 2:
				if pieces++; pieces > 1 {
					return nil, ambiguous("value of %s split in pieces", Clip(name))
				}
				text = append(text, t...)
			default: // outside the root or between fields
				if len(bytes.TrimSpace(t)) > 0 && outside == nil {
					outside = ambiguous("text outside a field")
				}
			}
		case xml.EndElement:
			if depth == 2 {
				out[name] = string(text)
			}
			depth--
		}
	}
	if !sawRoot {
		return nil, fmt.Errorf("%w: body is not XML: no root element", ErrMalformed)
	}
	if outside != nil {
		return nil, outside
	}
	return out, nil
}

// ParseStrictForm reads a form body or query as name → value (URL-decoded
// once), refusing with ErrAmbiguous what a backend's form parser could read
// differently: a name given twice (PHP keeps the last, Go the first), a
// name that is not plain [A-Za-z0-9_] (PHP turns "total.amount" into
// "total_amount", "a[]" into an array), an empty name, a ";" separator, or
// a broken %-escape. Values stay raw bytes (a GBK charset is not decoded).
func ParseStrictForm(raw string) (map[string]string, error) {
	out := map[string]string{}
	if raw == "" {
		return out, nil
	}
	if strings.Count(raw, "&") >= maxStrictFields {
		return nil, ambiguous("more than %d parameters", maxStrictFields)
	}
	if strings.Contains(raw, ";") {
		return nil, ambiguous("parameters separated by ';'")
	}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue // "a=1&&b=2": every parser skips it
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return nil, ambiguous("parameter name %s is not URL-encoded", Clip(k))
		}
		if !plainName(name) {
			return nil, ambiguous("parameter name %s is not a plain name", Clip(name))
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			return nil, ambiguous("value of %s is not URL-encoded", Clip(name))
		}
		if _, dup := out[name]; dup {
			return nil, ambiguous("parameter %s given twice", Clip(name))
		}
		out[name] = val
	}
	return out, nil
}

// plainName accepts the names payment platforms use: letters, digits, "_".
func plainName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
