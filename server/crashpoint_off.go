//go:build !crashpoints

package server

// crashPoint does nothing: crash points are a test hook, built in only with
// -tags crashpoints (see crashpoint.go).
func crashPoint(string) {}

// crashPointsBuiltIn tells the tests which build this is.
const crashPointsBuiltIn = false
