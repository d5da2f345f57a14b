package main

import (
	"context"
	"errors"
	"slices"
	"time"
)

// latency is what a scenario measured of one design's operations.
type latency struct {
	samples   []time.Duration
	p50, p99  time.Duration
	perSecond float64 // operations per second of time spent in them
}

func summarize(samples []time.Duration) latency {
	l := latency{samples: slices.Clone(samples)}
	if len(samples) == 0 {
		return l
	}
	slices.Sort(l.samples)
	l.p50 = l.samples[len(l.samples)/2]
	l.p99 = l.samples[len(l.samples)*99/100]
	var total time.Duration
	for _, s := range l.samples {
		total += s
	}
	l.perSecond = float64(len(l.samples)) / total.Seconds()
	return l
}

// interleave runs op for every design once per round, starting each round from the next one,
// until rounds are done or budget has passed, and returns each design's latencies. An op that
// returns errPeerFailed measured nothing; any other error stops it.
func interleave(ctx context.Context, n, rounds int, budget time.Duration, op func(design int) error) ([]latency, error) {
	samples := make([][]time.Duration, n)
	deadline := time.Now().Add(budget)
	for round := 0; round < rounds && time.Now().Before(deadline); round++ {
		for i := range n {
			d := (round + i) % n
			start := time.Now()
			err := op(d)
			if errors.Is(err, errPeerFailed) {
				continue
			}
			if err != nil {
				return nil, err
			}
			samples[d] = append(samples[d], time.Since(start))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]latency, n)
	for i, s := range samples {
		out[i] = summarize(s)
	}
	return out, nil
}
