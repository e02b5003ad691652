//go:build !crashpoints

package lifecycle

// CrashPoint does nothing: crash points are a test hook, built in only with
// -tags crashpoints (see crashpoint.go).
func CrashPoint(string) {}

// CrashPointsBuiltIn tells the tests which build this is.
const CrashPointsBuiltIn = false
