package cache

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestClaimScriptFields: the claim script packs a duplicate's record in
// the order its HMGET names the fields, and the gateway unpacks it in
// recordFields' order; the two lists must be one.
func TestClaimScriptFields(t *testing.T) {
	m := regexp.MustCompile(`(?s)redis\.call\('HMGET', h, (.*?)\)`).FindStringSubmatch(claimLua)
	if m == nil {
		t.Fatal("claim.lua has no HMGET of the record")
	}
	var got []string
	for _, f := range strings.Split(m[1], ",") {
		got = append(got, strings.Trim(strings.TrimSpace(f), "'"))
	}
	if !slices.Equal(got, recordFields) {
		t.Fatalf("claim.lua reads %v, recordFields is %v", got, recordFields)
	}
}
