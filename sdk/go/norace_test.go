//go:build !race

package sdk_test

// raceEnabled: the tests run without the race detector.
const raceEnabled = false
