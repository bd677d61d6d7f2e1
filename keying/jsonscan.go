package keying

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonAt finds the value at a dot path in doc, which validJSON (as
// json.Valid would) has accepted, and renders it as JSONPath and
// JSONString would from the decoded document: decoding a whole 1 KiB
// notification into maps and interfaces cost ~30 µs and 140 allocations
// per request for one field, where validating it costs ~2 µs and walking
// it a few more. Both give the same answers (FuzzJSONAtSame): a name
// given twice keeps its last value, names and strings are unescaped as
// encoding/json does, numbers come back as written, objects and arrays
// through encoding/json itself.
func jsonAt(doc []byte, path string) (string, bool) {
	v := bytes.TrimLeft(doc, " \t\r\n")
	if path != "" {
		// The path's parts in place: strings.Split's slice was an
		// allocation of every JSON-keyed request.
		for more := true; more; {
			var part string
			part, path, more = strings.Cut(path, ".")
			var ok bool
			switch v[0] {
			case '{':
				v, ok = jsonField(v, part)
			case '[':
				v, ok = jsonElem(v, part)
			}
			if !ok {
				return "", false
			}
		}
	}
	end := jsonSkip(v, 0)
	return jsonRender(v[:end]), true
}

// jsonField is the value of name in the object at v[0] (the last one when
// the name is given twice), from its first byte.
func jsonField(v []byte, name string) ([]byte, bool) {
	var found []byte
	i := jsonSpace(v, 1)
	if v[i] == '}' {
		return nil, false
	}
	for {
		kend := jsonSkip(v, i)
		key := v[i:kend]
		i = jsonSpace(v, kend)
		i = jsonSpace(v, i+1) // the colon
		end := jsonSkip(v, i)
		if jsonNameIs(key, name) {
			found = v[i:end]
		}
		i = jsonSpace(v, end)
		if v[i] == '}' {
			return found, found != nil
		}
		i = jsonSpace(v, i+1) // the comma
	}
}

// jsonElem is element part (as strconv.Atoi reads it) of the array at v[0].
func jsonElem(v []byte, part string) ([]byte, bool) {
	n, err := strconv.Atoi(part)
	if err != nil || n < 0 {
		return nil, false
	}
	i := jsonSpace(v, 1)
	if v[i] == ']' {
		return nil, false
	}
	for k := 0; ; k++ {
		end := jsonSkip(v, i)
		if k == n {
			return v[i:end], true
		}
		i = jsonSpace(v, end)
		if v[i] == ']' {
			return nil, false
		}
		i = jsonSpace(v, i+1)
	}
}

// jsonNested marks the bytes jsonSkip looks at inside an object or array.
var jsonNested = func() (t [256]bool) {
	for _, c := range `"{}[]` {
		t[c] = true
	}
	return t
}()

func jsonSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\r' || v[i] == '\n') {
		i++
	}
	return i
}

// jsonSkip returns the end of the valid value starting at v[i].
func jsonSkip(v []byte, i int) int {
	switch v[i] {
	case '"':
		// jsonStringEnd's loop without its checks, which v, valid, needs
		// none of: calling it made BenchmarkFieldsJSON/scan 10–20% slower.
		for i++; ; i++ {
			for jsonPlain[v[i]] {
				i++
			}
			if v[i] == '"' {
				return i + 1
			}
			i++ // a backslash (valid: no control characters): skip what it escapes
		}
	case '{', '[':
		depth := 0
		for ; ; i++ {
			for !jsonNested[v[i]] {
				i++
			}
			switch v[i] {
			case '"':
				i = jsonSkip(v, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default: // a number, true, false, null
		for i < len(v) && !strings.ContainsRune(",}] \t\r\n", rune(v[i])) {
			i++
		}
		return i
	}
}

// jsonNameIs reports whether the valid JSON string q unquotes to name,
// without making the string when it needs no unquoting.
func jsonNameIs(q []byte, name string) bool {
	if in, ok := jsonVerbatim(q); ok {
		return string(in) == name // no allocation
	}
	return jsonString(q) == name
}

// jsonVerbatim is the inside of the valid JSON string q, and whether it
// unquotes to itself (no escape, valid UTF-8).
func jsonVerbatim(q []byte) ([]byte, bool) {
	in := q[1 : len(q)-1]
	return in, bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in)
}

// jsonString unquotes a valid JSON string as encoding/json does (invalid
// UTF-8 and lone surrogates become U+FFFD).
func jsonString(q []byte) string {
	if in, ok := jsonVerbatim(q); ok {
		return string(in)
	}
	var s string
	_ = json.Unmarshal(q, &s) // q is valid: it cannot fail
	return s
}

// jsonRender is JSONString of the decoded value v.
func jsonRender(v []byte) string {
	switch v[0] {
	case '"':
		return jsonString(v)
	case 'n':
		return ""
	case '{', '[':
		var x any
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		_ = dec.Decode(&x)
		return JSONString(x)
	default: // numbers as written, true, false
		return string(v)
	}
}
