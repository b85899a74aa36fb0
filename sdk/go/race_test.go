//go:build race

package sdk_test

// raceEnabled: the tests run with the race detector, and so does the
// example game server they build.
const raceEnabled = true
