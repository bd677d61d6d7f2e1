//go:build !race

package cache

const raceDetector = false
