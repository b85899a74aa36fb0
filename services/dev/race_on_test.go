//go:build race

package dev_test

// raceEnabled tells whether the tests run with the race detector.
const raceEnabled = true
