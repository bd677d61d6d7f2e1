//go:build race

package store

// raceDetector: this test binary runs under -race, several times slower,
// while the rest of the suite shares the machine.
const raceDetector = true
