package benchkit

import (
	"slices"
	"testing"
	"time"
)

// Case is one contender in Compare: Run does one operation.
type Case struct {
	Name string
	Run  func() error
}

// Compare measures candidates against a baseline in one run. Each round calls the baseline and
// every candidate once, starting from a different one each round, so the noise of a shared
// machine falls on all of them alike. It reports each one's median latency ("<name>-p50-us")
// and each candidate's median over the baseline's ("<name>/<baseline>"), the figure to quote.
func Compare(b *testing.B, baseline Case, candidates ...Case) {
	b.Helper()
	cases := append([]Case{baseline}, candidates...)
	samples := make([][]time.Duration, len(cases))
	round := 0
	for b.Loop() {
		for i := range cases {
			c := (round + i) % len(cases)
			start := time.Now()
			if err := cases[c].Run(); err != nil {
				b.Fatalf("%s: %v", cases[c].Name, err)
			}
			samples[c] = append(samples[c], time.Since(start))
		}
		round++
	}

	medians := make([]time.Duration, len(cases))
	for i, s := range samples {
		slices.Sort(s)
		medians[i] = s[len(s)/2]
		b.ReportMetric(float64(medians[i].Nanoseconds())/1e3, cases[i].Name+"-p50-us")
	}
	for i := 1; i < len(cases); i++ {
		b.ReportMetric(float64(medians[i])/float64(medians[0]), cases[i].Name+"/"+baseline.Name)
	}
}
