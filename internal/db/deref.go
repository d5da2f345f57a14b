package db

// Deref is the value a nullable column scanned into, or its type's zero value for NULL.
func Deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
