//go:build race

package deviceplugin

// raceEnabled is true when the tests run with -race, which slows the model tests down about
// five times.
const raceEnabled = true
