// Package benchkit is what pglock's benchmarks share: Compare runs candidates against their
// baseline round by round in one run and reports ratios, Contend drives contention workers and
// reports throughput, waits and fairness, and the raw baselines are what a team would write by
// hand without pglock. Test databases come from testdb; this package only measures.
package benchkit
