//go:build !race

package testenv

// Race says the test binary runs under -race, several times slower: a
// test that bounds a latency allows more there.
const Race = false
