package keying

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Fields reads a request's body as JSON, form or XML on first use and keeps
// the parsed form. It is safe for concurrent use.
type Fields struct {
	r *Request

	jsonOnce sync.Once
	jsonErr  error

	formOnce sync.Once
	formVal  url.Values
	formErr  error

	xmlOnce sync.Once
	xmlVal  map[string]string
	xmlErr  error
}

// NewFields returns lazy field access to r.
func NewFields(r *Request) *Fields { return &Fields{r: r} }

// NewNotification returns a notification with lazy field access to r
// (NewFields): the two in one allocation.
func NewNotification(r *Request) *Notification {
	p := &struct {
		n Notification
		f Fields
	}{f: Fields{r: r}}
	p.n.Fields = &p.f
	return &p.n
}

// JSON returns the value at a dot path ("data.object.id", "items.0.id").
// Strings come back unquoted, numbers as written, objects and arrays as
// compact JSON, null as "". ok is false when the path does not exist; err
// wraps ErrMalformed when the body is not JSON.
func (f *Fields) JSON(path string) (val string, ok bool, err error) {
	f.jsonOnce.Do(func() {
		if validJSON(f.r.Body) { // json.Valid's answer, at a fifth of its cost
			return
		}
		// Only a refused body is decoded, for the reason to give.
		dec := json.NewDecoder(bytes.NewReader(f.r.Body))
		var v any
		if err := dec.Decode(&v); err != nil {
			f.jsonErr = fmt.Errorf("%w: body is not JSON: %v", ErrMalformed, err)
			return
		}
		f.jsonErr = fmt.Errorf("%w: body is not JSON: trailing data", ErrMalformed)
	})
	if f.jsonErr != nil {
		return "", false, f.jsonErr
	}
	v, ok := jsonAt(f.r.Body, path)
	return v, ok, nil
}

// JSONPath walks a decoded JSON value (decoded with UseNumber) along a dot path.
func JSONPath(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, part := range strings.Split(path, ".") {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[part]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// JSONString renders a decoded JSON value as a key part.
func JSONString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// Form returns a field of a form-encoded body, or of the query string on
// GET (Alipay's browser return). Values are URL-decoded once. err wraps
// ErrMalformed when the form cannot be parsed.
func (f *Fields) Form(field string) (val string, ok bool, err error) {
	f.formOnce.Do(func() {
		raw := string(f.r.Body)
		if f.r.Method == http.MethodGet || f.r.Method == http.MethodHead {
			raw = ""
			if f.r.URL != nil {
				raw = f.r.URL.RawQuery
			}
		}
		f.formVal, f.formErr = url.ParseQuery(raw)
		if f.formErr != nil {
			f.formErr = fmt.Errorf("%w: body is not a form: %v", ErrMalformed, f.formErr)
		}
	})
	if f.formErr != nil {
		return "", false, f.formErr
	}
	vs, ok := f.formVal[field]
	if !ok || len(vs) == 0 {
		return "", false, nil
	}
	return vs[0], true, nil
}

// FormCount is how many times field occurs in the form (or the query on
// GET): more than once, a backend may read another value than Form's
// first (PHP, Django and Rails read the last).
func (f *Fields) FormCount(field string) int {
	if _, _, err := f.Form(field); err != nil {
		return 0
	}
	return len(f.formVal[field])
}

// XML returns the text of a direct child of the body's root element (the
// WeChat Pay v2 layout: <xml><transaction_id><![CDATA[…]]></transaction_id>…),
// read strictly (ParseStrictXML). err wraps ErrMalformed when the body is
// not XML or could be read in more than one way.
func (f *Fields) XML(elem string) (val string, ok bool, err error) {
	f.xmlOnce.Do(func() {
		f.xmlVal, f.xmlErr = ParseStrictXML(f.r.Body)
		if errors.Is(f.xmlErr, ErrAmbiguous) {
			// A key must not be read from a field the backend could
			// read otherwise (a repeated element…).
			f.xmlErr = fmt.Errorf("%w: %v", ErrMalformed, f.xmlErr)
		}
	})
	if f.xmlErr != nil {
		return "", false, f.xmlErr
	}
	v, ok := f.xmlVal[elem]
	return v, ok, nil
}

// ParseFlatXML reads the direct children of the root element as name → text,
// leniently: deeper elements are skipped, a repeated name keeps its first
// value, a second root element is malformed. It reads the backend's answers
// (the success rule); notifications are read with ParseStrictXML.
func ParseFlatXML(body []byte) (map[string]string, error) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	out := map[string]string{}
	depth := 0
	var name string
	var text strings.Builder
	sawRoot := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: body is not XML: %v", ErrMalformed, err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 {
				if sawRoot {
					// A second root could carry a second, unsigned
					// copy of a field: refuse it.
					return nil, fmt.Errorf("%w: body is not XML: more than one root element", ErrMalformed)
				}
				sawRoot = true
			}
			if depth == 2 {
				name = t.Name.Local
				text.Reset()
			}
		case xml.CharData:
			if depth == 2 {
				text.Write(t)
			}
		case xml.EndElement:
			if depth == 2 {
				if _, dup := out[name]; !dup {
					out[name] = text.String()
				}
			}
			depth--
		}
	}
	if !sawRoot {
		return nil, fmt.Errorf("%w: body is not XML: no root element", ErrMalformed)
	}
	return out, nil
}
