package benchkit

import (
	"slices"
	"testing"
	"time"
)

// Percentiles reports the median and 99th percentile of samples, in milliseconds, as
// "<name>-p50-ms" and "<name>-p99-ms". It sorts samples.
func Percentiles(b *testing.B, name string, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		b.Fatalf("%s: no samples", name)
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1e3, name+"-p50-ms")
	b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds())/1e3, name+"-p99-ms")
}
