package keying

import "bytes"

// validJSON reports whether doc is exactly one JSON value, as
// encoding/json's Valid does: the same grammar, the same nesting limit
// (10,000), any bytes from 0x20 up inside strings (Valid checks no UTF-8
// either). Valid's scanner calls a function per byte; this loop costs a
// fifth of it on a 1 KiB notification, which every copy of a JSON-keyed
// route pays (BenchmarkValidJSON). TestValidJSONSame and FuzzValidJSONSame
// hold the two to the same answers.
func validJSON(doc []byte) bool {
	var buf [64]byte // open containers' closing bytes; deeper ones grow it
	stack := buf[:0]
	i := jsonSpace(doc, 0)
	for {
		// A value starts at i.
		if i >= len(doc) {
			return false
		}
		switch c := doc[i]; c {
		case '{', '[':
			if len(stack) == jsonMaxDepth {
				return false
			}
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			if i = jsonSpace(doc, i+1); i < len(doc) && doc[i] == end {
				i++ // empty: a value already closed
				break
			}
			stack = append(stack, end)
			if c == '{' {
				if i = jsonMember(doc, i); i < 0 {
					return false
				}
			}
			continue // its first value
		case '"':
			if i = jsonStringEnd(doc, i); i < 0 {
				return false
			}
		case 't':
			if !bytes.HasPrefix(doc[i:], []byte("true")) {
				return false
			}
			i += 4
		case 'f':
			if !bytes.HasPrefix(doc[i:], []byte("false")) {
				return false
			}
			i += 5
		case 'n':
			if !bytes.HasPrefix(doc[i:], []byte("null")) {
				return false
			}
			i += 4
		default:
			if i = jsonNumber(doc, i); i < 0 {
				return false
			}
		}
		// A value ended at i: close what it ends, then the next value.
		for {
			i = jsonSpace(doc, i)
			if len(stack) == 0 {
				return i == len(doc)
			}
			if i >= len(doc) {
				return false
			}
			end := stack[len(stack)-1]
			if doc[i] == end {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if doc[i] != ',' {
				return false
			}
			i = jsonSpace(doc, i+1)
			if end == '}' {
				if i = jsonMember(doc, i); i < 0 {
					return false
				}
			}
			break
		}
	}
}

// jsonMaxDepth is encoding/json's nesting limit (maxNestingDepth).
const jsonMaxDepth = 10000

// jsonMember reads a member's name and colon at i: where its value
// starts, or -1.
func jsonMember(doc []byte, i int) int {
	if i >= len(doc) || doc[i] != '"' {
		return -1
	}
	if i = jsonStringEnd(doc, i); i < 0 {
		return -1
	}
	if i = jsonSpace(doc, i); i >= len(doc) || doc[i] != ':' {
		return -1
	}
	return jsonSpace(doc, i+1)
}

// jsonPlain marks the bytes a string holds as they are: not '"', not
// '\\', not a control character.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonStringEnd reads the string whose quote is at i: where it ends, or -1.
func jsonStringEnd(doc []byte, i int) int {
	for i++; ; {
		for i < len(doc) && jsonPlain[doc[i]] {
			i++
		}
		if i >= len(doc) {
			return -1
		}
		switch doc[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(doc) {
				return -1
			}
			switch doc[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(doc) {
					return -1
				}
				for _, h := range doc[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		default:
			return -1 // a control character
		}
	}
}

// jsonNumber reads the number at i: where it ends, or -1.
func jsonNumber(doc []byte, i int) int {
	if i < len(doc) && doc[i] == '-' {
		i++
	}
	switch {
	case i < len(doc) && doc[i] == '0':
		i++
	case i < len(doc) && '1' <= doc[i] && doc[i] <= '9':
		i = jsonDigits(doc, i+1)
	default:
		return -1
	}
	if i < len(doc) && doc[i] == '.' {
		if i+1 >= len(doc) || doc[i+1] < '0' || doc[i+1] > '9' {
			return -1
		}
		i = jsonDigits(doc, i+1)
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		if i >= len(doc) || doc[i] < '0' || doc[i] > '9' {
			return -1
		}
		i = jsonDigits(doc, i)
	}
	return i
}

// jsonDigits skips digits from i.
func jsonDigits(doc []byte, i int) int {
	for i < len(doc) && '0' <= doc[i] && doc[i] <= '9' {
		i++
	}
	return i
}
