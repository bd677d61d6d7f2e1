package keying

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validJSONSeeds are documents and near-documents for both tests below:
// every rule of the grammar, each side of it.
var validJSONSeeds = []string{
	``, ` `, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e07`, `-1.0e+10`, `2a`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `nullnull`, `True`,
	`""`, `"`, `"a`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\x"`,
	"\"a\tb\"", "\"a\x1fb\"", "\"\x7f\"", "\"\xff\xfe\"", "\"caf\xc3\xa9\"",
	`{}`, `{ }`, `{`, `}`, `{"a":1}`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a" : 1 , "b" : [ ] }`,
	`{"a":1 "b":2}`, `{,"a":1}`, `{"a":1}}`, `{"a":{"b":{"c":[1,{"d":null}]}}}`, `{1:2}`,
	`[]`, `[ ]`, `[`, `]`, `[1,]`, `[,1]`, `[1 2]`, `[1,[2,[3]]]`, `[[]]`, `[{}]`, `[]]`, `[[]`,
	`{"a":1} {"a":2}`, `1 2`, "\t\n\r 1 \t\n\r", "\v1", "\u00a01", ` [ "a" , true , null , -2.5E3 ] `,
	`{"id":"evt_1","data":{"object":{"id":"pi_1","amount":4990,"metadata":{}}}}`,
}

// TestValidJSONSame: validJSON gives encoding/json's Valid answer on the
// seeds, on documents nested to the limit and past it, and on 200,000
// random edits of real notifications (the platforms' samples in testdata)
// and of the seeds.
func TestValidJSONSame(t *testing.T) {
	check := func(doc []byte) {
		t.Helper()
		if got, want := validJSON(doc), json.Valid(doc); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", doc, got, want)
		}
	}
	docs := [][]byte{}
	for _, s := range validJSONSeeds {
		check([]byte(s))
		docs = append(docs, []byte(s))
	}
	for _, d := range []int{jsonMaxDepth - 1, jsonMaxDepth, jsonMaxDepth + 1} {
		check([]byte(strings.Repeat("[", d) + strings.Repeat("]", d)))
		check([]byte(strings.Repeat(`{"a":`, d) + "1" + strings.Repeat("}", d)))
		check([]byte(strings.Repeat(`[{"a":`, d/2) + "[]" + strings.Repeat("}]", d/2)))
	}
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) == 0 {
		t.Fatal("no JSON samples in testdata")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !validJSON(b) {
			t.Fatalf("%s: a platform's sample refused", f)
		}
		docs = append(docs, b)
	}
	const alphabet = "{}[]\",:\\ \t\n0123456789-+.eEtrufalsn/ux\x00\x1f\x7f\xc3\xa9"
	rng := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for range 200_000 {
		doc := bytes.Clone(docs[rng.IntN(len(docs))])
		for range 1 + rng.IntN(3) {
			at := 0
			if len(doc) > 0 {
				at = rng.IntN(len(doc))
			}
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(4) {
			case 0:
				if len(doc) > 0 {
					doc[at] = c
				}
			case 1:
				doc = append(doc[:at], append([]byte{c}, doc[at:]...)...)
			case 2:
				if len(doc) > 0 {
					doc = append(doc[:at], doc[at+1:]...)
				}
			case 3:
				doc = doc[:at]
			}
		}
		check(doc)
		if json.Valid(doc) {
			valid++
		}
	}
	// Both sides of the line were exercised, not only broken documents.
	if valid < 5_000 || valid > 195_000 {
		t.Fatalf("%d of 200,000 edited documents valid: the edits test one side only", valid)
	}
}

func FuzzValidJSONSame(f *testing.F) {
	for _, s := range validJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if got, want := validJSON(doc), json.Valid(doc); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", doc, got, want)
		}
	})
}

// BenchmarkValidJSON: validating BenchmarkFieldsJSON's ~1 KiB
// notification, here and by encoding/json.
func BenchmarkValidJSON(b *testing.B) {
	body := benchNotification()
	for _, c := range []struct {
		name  string
		valid func([]byte) bool
	}{{"validJSON", validJSON}, {"json.Valid", json.Valid}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !c.valid(body) {
					b.Fatal("refused")
				}
			}
		})
	}
}
