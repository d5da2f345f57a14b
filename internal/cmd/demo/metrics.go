package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pglock/pglock/otelpglock"
)

// metricsEnv is where a worker serves /metrics: an address the orchestrator chose.
const metricsEnv = "PGLOCK_DEMO_METRICS"

// serveMetrics serves this worker's pglock metrics in Prometheus's format on addr, through
// OpenTelemetry's Prometheus exporter, and returns the Observer to give every package.
func serveMetrics(addr string) (*otelpglock.Observer, func(), error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := otelpglock.New(&otelpglock.Options{MeterProvider: provider})
	if err != nil {
		return nil, nil, err
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(listener)
	return obs, func() {
		srv.Close()
		provider.Shutdown(context.Background())
	}, nil
}

// metricsAddrs picks a free loopback port for each worker's /metrics.
func metricsAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	return addrs, nil
}

// sample is one line of Prometheus's text format.
type sample struct {
	name   string
	labels string
	value  float64
}

// scrape reads a worker's /metrics.
func scrape(ctx context.Context, addr string) ([]sample, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", errors.New(resp.Status)
	}
	var samples []sample
	var text strings.Builder
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		text.WriteString(line + "\n")
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if i := strings.LastIndexByte(value, ' '); i >= 0 {
			value = value[:i] // a timestamp
		}
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			continue
		}
		name, labels, _ := strings.Cut(series, "{")
		samples = append(samples, sample{name: name, labels: "{" + labels, value: v})
	}
	return samples, text.String(), lines.Err()
}

// sum adds up the samples of name whose labels hold every one of want (`key="value"`).
func sum(samples []sample, name string, want ...string) float64 {
	total := 0.0
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for _, w := range want {
			if !strings.Contains(s.labels, w) {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// metricsReport reads every live worker's /metrics and returns a few figures summed over them,
// and an excerpt of one worker's page.
func metricsReport(ctx context.Context, addrs []string, procs []*workerProc) string {
	var all []sample
	var excerpt string
	for i, p := range procs {
		if p.dead {
			continue // killed: its figures went with it
		}
		samples, text, err := scrape(ctx, addrs[i])
		if err != nil {
			fmt.Fprintf(os.Stderr, "demo: metrics of worker %d: %v\n", p.id, err)
			continue
		}
		all = append(all, samples...)
		if excerpt == "" {
			excerpt = trim(text, p.id, addrs[i])
		}
	}
	deliveries := func(outcome string) int {
		return int(sum(all, "pglock_job_deliveries_total", `pglock_outcome="`+outcome+`"`))
	}
	lagCount := sum(all, "pglock_cron_fire_lag_seconds_count")
	lagMean := 0.0
	if lagCount > 0 {
		lagMean = sum(all, "pglock_cron_fire_lag_seconds_sum") / lagCount
	}
	return fmt.Sprintf("metrics of the workers still running, read back from their /metrics:\n"+
		"  job deliveries: %d ran, %d already done, %d in progress elsewhere\n"+
		"  cron runs ran: %.0f (fire lag mean %.1f ms on the database's clock)\n"+
		"  leader transitions: %.0f elected, %.0f resigned; rate-limit decisions: %.0f allowed, %.0f denied\n%s",
		deliveries("ran"), deliveries("already_done"), deliveries("in_progress"),
		sum(all, "pglock_cron_runs_total", `pglock_outcome="ran"`), lagMean*1000,
		sum(all, "pglock_leader_transitions_total", `pglock_outcome="elected"`),
		sum(all, "pglock_leader_transitions_total", `pglock_outcome="resigned"`),
		sum(all, "pglock_ratelimit_decisions_total", `pglock_outcome="allowed"`),
		sum(all, "pglock_ratelimit_decisions_total", `pglock_outcome="denied"`), excerpt)
}

// trim keeps a few of pglock's series from a /metrics page: no histogram buckets, no HELP.
func trim(text string, worker int, addr string) string {
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "pglock_") && !strings.Contains(line, "_bucket{") {
			keep = append(keep, "  "+line)
		}
	}
	sort.Strings(keep)
	return fmt.Sprintf("\n$ curl -s http://%s/metrics  # worker %d, trimmed: pglock's series, no buckets\n%s\n",
		addr, worker, strings.Join(keep, "\n"))
}
