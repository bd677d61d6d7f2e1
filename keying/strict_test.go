package keying

import (
	"encoding/xml"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseStrictXML(t *testing.T) {
	ok := []struct {
		doc  string
		want map[string]string
	}{
		{`<xml><a><![CDATA[x<y]]></a><b>1</b><c/></xml>`, map[string]string{"a": "x<y", "b": "1", "c": ""}},
		{"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<xml>\n  <a>1</a>\n  <b> 2 </b>\n</xml>\n", map[string]string{"a": "1", "b": " 2 "}},
		{`<root><a>&amp;&#49;</a></root>`, map[string]string{"a": "&1"}},
		{`<xml></xml>`, map[string]string{}},
	}
	for _, c := range ok {
		m, err := ParseStrictXML([]byte(c.doc))
		if err != nil {
			t.Errorf("ParseStrictXML(%q) = %v", c.doc, err)
			continue
		}
		if len(m) != len(c.want) {
			t.Errorf("ParseStrictXML(%q) = %v, want %v", c.doc, m, c.want)
		}
		for k, v := range c.want {
			if m[k] != v {
				t.Errorf("ParseStrictXML(%q)[%s] = %q, want %q", c.doc, k, m[k], v)
			}
		}
	}
	refused := map[string]string{
		"repeated element":           `<xml><total_fee>1</total_fee><total_fee>100000</total_fee></xml>`,
		"element inside a value":     `<xml><total_fee>1<x>00000</x></total_fee></xml>`,
		"element before the value":   `<xml><total_fee><x/>1</total_fee></xml>`,
		"second root":                `<xml><a>1</a></xml><xml><a>2</a></xml>`,
		"empty second root":          `<xml><a>1</a></xml><xml/>`,
		"text after the root":        `<xml><a>1</a></xml>trailing`,
		"text before the root":       `junk<xml><a>1</a></xml>`,
		"text between fields":        `<xml><a>1</a>loose<b>2</b></xml>`,
		"DOCTYPE":                    `<!DOCTYPE xml><xml><a>1</a></xml>`,
		"entity declaration":         `<!DOCTYPE x [<!ENTITY e "100000">]><xml><a>&e;</a></xml>`,
		"processing instruction":     `<xml><?php echo 1 ?><a>1</a></xml>`,
		"PI before the root":         `<?xml-stylesheet href="x"?><xml><a>1</a></xml>`,
		"comment inside a value":     `<xml><a>1<!-- -->00</a></xml>`,
		"comment":                    `<xml><!-- x --><a>1</a></xml>`,
		"value split text and CDATA": `<xml><a>1<![CDATA[00]]></a></xml>`,
		"value split in two CDATA":   `<xml><a><![CDATA[1]]><![CDATA[00]]></a></xml>`,
		"attribute":                  `<xml><a x="1">1</a></xml>`,
		"namespace":                  `<xml xmlns:p="u"><p:a>1</p:a></xml>`,
	}
	for name, doc := range refused {
		if _, err := ParseStrictXML([]byte(doc)); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("%s: ParseStrictXML(%q) = %v, want ErrAmbiguous", name, doc, err)
		}
	}
	for _, bad := range []string{``, `not xml`, `return_code=SUCCESS`, `<xml><a>1</b></xml>`, `<xml><a>&nbsp;</a></xml>`, `<xml><a>1</a>`} {
		if _, err := ParseStrictXML([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseStrictXML(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestParseStrictForm(t *testing.T) {
	m, err := ParseStrictForm("a=1&b=%E4%BD%A0+x&&c=&D_9=%2B")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 || m["a"] != "1" || m["b"] != "你 x" || m["c"] != "" || m["D_9"] != "+" {
		t.Fatalf("parseStrictForm = %v", m)
	}
	for _, bad := range []string{
		"a=1&a=2", "a=1&a=", "a.b=1", "a[]=1", "a%5B%5D=1", "a+b=1", "=1", "a=1;b=2", "a=%zz", "%zz=1", "a=1&" + strings.Repeat("b", 200) + "=1",
	} {
		if _, err := ParseStrictForm(bad); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("parseStrictForm(%q) = %v, want ErrAmbiguous", bad, err)
		}
	}
}

// otherXMLReading reads a flat document the way a backend's XML binding
// does (encoding/xml's Unmarshal with ",any"), independently of
// ParseStrictXML.
func otherXMLReading(body []byte) ([][2]string, error) {
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

// FuzzParseStrictXML: whatever the strict reader accepts, an independent
// XML binding reads as the same fields, each once, with the same values.
func FuzzParseStrictXML(f *testing.F) {
	f.Add([]byte(`<xml><a><![CDATA[1]]></a><b>2</b></xml>`))
	f.Add([]byte(`<?xml version="1.0"?><xml><a>1</a><a>2</a></xml>`))
	f.Add([]byte(`<xml><a>1<b>2</b></a></xml>`))
	f.Add([]byte(`<xml><a>1</a></xml><xml><a>2</a></xml>`))
	f.Add([]byte(`<!DOCTYPE x [<!ENTITY e "1">]><xml><a>&e;</a></xml>`))
	f.Add([]byte("<xml>\n<a>&#x31;&amp;</a>\n</xml>"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := ParseStrictXML(body)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		other, err := otherXMLReading(body)
		if err != nil {
			t.Fatalf("strict reader accepted what encoding/xml refuses: %v", err)
		}
		if len(other) != len(m) {
			t.Fatalf("strict reader has %d fields, encoding/xml %d", len(m), len(other))
		}
		for _, kv := range other {
			if v, ok := m[kv[0]]; !ok || v != kv[1] {
				t.Fatalf("field %q: strict %q, encoding/xml %q", kv[0], v, kv[1])
			}
		}
	})
}

// FuzzParseStrictForm: whatever the strict reader accepts, Go's form parser
// reads as the same names, each once, with the same values (so first-wins
// and last-wins backends agree with what was verified).
func FuzzParseStrictForm(f *testing.F) {
	f.Add("a=1&b=2")
	f.Add("a=1&a=2")
	f.Add("a=%E4%BD%A0&b=+&c")
	f.Add("a.b=1&a_b=2")
	f.Add("a=1;a=2")
	f.Fuzz(func(t *testing.T, raw string) {
		m, err := ParseStrictForm(raw)
		if err != nil {
			if !errors.Is(err, ErrAmbiguous) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		q, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatalf("strict reader accepted what url.ParseQuery refuses: %v", err)
		}
		if len(q) != len(m) {
			t.Fatalf("strict reader has %d names, url.ParseQuery %d", len(m), len(q))
		}
		for k, vs := range q {
			if len(vs) != 1 || m[k] != vs[0] || !plainName(k) {
				t.Fatalf("name %q: strict %q, url.ParseQuery %q", k, m[k], vs)
			}
		}
	})
}
