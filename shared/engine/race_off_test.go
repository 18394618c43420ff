//go:build !race

package engine_test

// raceDetector reports whether the test binary runs under the race
// detector, which slows the pure-Go SQLite of the embedded backend some
// twenty-fold.
const raceDetector = false
