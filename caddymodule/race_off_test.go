//go:build !race

package caddymodule

// raceDetector: this test binary runs under -race, several times slower.
const raceDetector = false
