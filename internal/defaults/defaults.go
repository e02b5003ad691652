// Package defaults fills in the settings a caller left unset.
package defaults

// Positive sets *v to def unless *v is positive: for a limit, a count or a
// timeout, zero (and a negative value, which means nothing) is "not set".
func Positive[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
