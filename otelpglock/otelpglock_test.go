package otelpglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/otelpglock"
	"github.com/pglock/pglock/ratelimit"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// instance is one process's telemetry: an Observer on an SDK with an in-memory reader and a
// span recorder.
type instance struct {
	obs    *otelpglock.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer // the application's, on the same provider
}

func newInstance(t *testing.T, opts *otelpglock.Options) *instance { return newInstanceTB(t, opts) }

func newInstanceB(b *testing.B) *instance { return newInstanceTB(b, nil) }

func newInstanceTB(t testing.TB, opts *otelpglock.Options) *instance {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() {
		require.NoError(t, mp.Shutdown(context.Background()))
		require.NoError(t, tp.Shutdown(context.Background()))
	})
	o := otelpglock.Options{}
	if opts != nil {
		o = *opts
	}
	o.MeterProvider, o.TracerProvider = mp, tp
	obs, err := otelpglock.New(&o)
	require.NoError(t, err)
	return &instance{obs: obs, reader: reader, spans: spans, tracer: tp.Tracer("app")}
}

// point is what an instrument shows for one set of attributes: a sum's or gauge's value, or a
// histogram's count, sum and max.
type point struct {
	value, count, sum, max float64
	found                  bool
}

// read collects the instrument name's data points whose attributes include want, summed.
func (in *instance) read(t *testing.T, name string, want ...attribute.KeyValue) point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, in.reader.Collect(context.Background(), &rm))
	var p point
	matches := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		p.found = true
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					if matches(dp.Attributes) {
						p.value += float64(dp.Value)
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					if matches(dp.Attributes) {
						p.value += float64(dp.Value)
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range data.DataPoints {
					if matches(dp.Attributes) {
						p.value += dp.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					if matches(dp.Attributes) {
						p.count += float64(dp.Count)
						p.sum += dp.Sum
						if m, ok := dp.Max.Value(); ok && m > p.max {
							p.max = m
						}
					}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return p
}

// waitValue waits until the instrument shows value for want (events are delivered off the
// primitive's goroutine).
func (in *instance) waitValue(t *testing.T, value float64, name string, want ...attribute.KeyValue) {
	t.Helper()
	testdb.WaitFor(t, func() bool { return in.read(t, name, want...).value == value }, "%s%v = %v", name, want, value)
}

// waitCount waits until the histogram name has count samples for want.
func (in *instance) waitCount(t *testing.T, count float64, name string, want ...attribute.KeyValue) point {
	t.Helper()
	var p point
	testdb.WaitFor(t, func() bool { p = in.read(t, name, want...); return p.count == count }, "%s%v count = %v", name, want, count)
	return p
}

var (
	lockAttr      = otelpglock.AttrPrimitive.String(string(pglock.PrimitiveLock))
	semaphoreAttr = otelpglock.AttrPrimitive.String(string(pglock.PrimitiveSemaphore))
	advisoryAttr  = otelpglock.AttrPrimitive.String(string(pglock.PrimitiveAdvisory))
)

func outcome(o pglock.Outcome) attribute.KeyValue { return otelpglock.AttrOutcome.String(string(o)) }
func cause(c pglock.Cause) attribute.KeyValue     { return otelpglock.AttrCause.String(string(c)) }
func name(n string) attribute.KeyValue            { return otelpglock.AttrName.String(n) }

func newLocker(t *testing.T, pool *pgxpool.Pool, cfg *tablelock.Config) *tablelock.Locker {
	t.Helper()
	l, err := tablelock.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

// A lock cut off from its database by a partition is lost at its deadline: counted by cause,
// its hold ended "lost", and the locks held now back to none.
func TestALockLostThroughAPartitionIsCountedByItsCause(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	pool, partition := d.PartitionablePool(t, nil)
	l := newLocker(t, pool, &tablelock.Config{Observer: in.obs, TTL: 3 * time.Second})
	lk, err := l.Acquire(testdb.Context(t), "partitioned", nil)
	require.NoError(t, err)
	in.waitValue(t, 1, "pglock.lock.held", lockAttr)
	heal := partition()
	defer heal()
	testdb.Receive(t, lk.Lost())
	in.waitValue(t, 1, "pglock.lease.losses", lockAttr, cause(pglock.CauseRenewalFailed))
	in.waitValue(t, 0, "pglock.lock.held", lockAttr)
	in.waitCount(t, 1, "pglock.lock.held.duration", lockAttr, outcome(pglock.OutcomeLost))
	require.Equal(t, 1.0, in.read(t, "pglock.lock.acquire.duration", lockAttr, outcome(pglock.OutcomeAcquired)).count)
}

// A renewal that fails (its connection killed) is counted, and retried.
func TestAFailedRenewalIsCounted(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = "renewal-failures" })
	l := newLocker(t, pool, &tablelock.Config{Observer: in.obs, HeartbeatInterval: 200 * time.Millisecond})
	_, err := l.TryAcquire(ctx, "renewed", nil)
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool {
		d.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'renewal-failures'")
		time.Sleep(45 * time.Millisecond) // the pace of the terminations: one may land mid-renewal
		return in.read(t, "pglock.lease.renewal.failures", lockAttr).value > 0
	}, "a renewal failed")
}

// A fence that finds its lock taken refuses the write, is counted, and loses the lock; a fence
// of the lock known lost is refused without a round trip, and counted too (the alert is for a
// holder that goes on writing after its loss).
func TestEveryRefusedFenceIsCountedAndTheFirstLosesTheLock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	l := newLocker(t, d.Pool, &tablelock.Config{Observer: in.obs})
	lk, err := l.TryAcquire(ctx, "fenced", nil)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'fenced'") // an operator's force-release
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return lk.Fence(ctx, tx) })
	require.ErrorIs(t, err, pglock.ErrLockLost)
	in.waitValue(t, 1, "pglock.fence.refusals", lockAttr)
	in.waitValue(t, 1, "pglock.lease.losses", lockAttr, cause(pglock.CauseForceReleased))

	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return lk.Fence(ctx, tx) })
	require.ErrorIs(t, err, pglock.ErrLockLost)
	in.waitValue(t, 2, "pglock.fence.refusals", lockAttr)
	in.waitValue(t, 1, "pglock.lease.losses", lockAttr, cause(pglock.CauseForceReleased))
}

// Semaphore places are counted per semaphore (a declared name), as many as each holder takes;
// advisory locks by primitive; a killed session's locks are lost by connection.
func TestSemaphorePermitsAndAdvisoryLocksAreCounted(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	l := newLocker(t, d.Pool, &tablelock.Config{Observer: in.obs})
	a, err := l.TryAcquireSemaphore(ctx, "pool", 5, nil)
	require.NoError(t, err)
	_, err = l.AcquirePlaces(ctx, "pool", tablelock.Places{Permits: 5, Take: 3, Key: "tenant"}, nil)
	require.NoError(t, err)
	in.waitValue(t, 4, "pglock.semaphore.permits.held", name("pool"))
	require.NoError(t, a.Release(ctx))
	in.waitValue(t, 3, "pglock.semaphore.permits.held", name("pool"))
	in.waitValue(t, 1, "pglock.lock.held", semaphoreAttr)
	// A combined acquisition's places count with the semaphore's others, and its lock as a lock.
	both, err := l.AcquireAll(ctx, []tablelock.Resource{{Semaphore: "pool", Places: tablelock.Places{Permits: 5, Take: 2}},
		{Lock: "ledger"}}, nil)
	require.NoError(t, err)
	in.waitValue(t, 5, "pglock.semaphore.permits.held", name("pool"))
	in.waitValue(t, 2, "pglock.lock.held", semaphoreAttr)
	require.NoError(t, both.Release(ctx))
	in.waitValue(t, 3, "pglock.semaphore.permits.held", name("pool"))
	in.waitValue(t, 1, "pglock.lock.held", semaphoreAttr)

	s, err := advisory.Open(ctx, d.Pool, &advisory.Config{Observer: in.obs})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	require.NoError(t, s.Lock(ctx, advisory.StringKey("a")))
	require.NoError(t, s.Lock(ctx, advisory.StringKey("a"))) // stacked: no acquisition, nothing more held
	require.NoError(t, s.Unlock(ctx, advisory.StringKey("a")))
	require.NoError(t, s.TryLock(ctx, advisory.StringKey("b")))
	require.ErrorIs(t, (func() error {
		other, err := advisory.Open(ctx, d.Pool, nil)
		require.NoError(t, err)
		defer other.Close(ctx)
		return other.TryLock(ctx, advisory.StringKey("a"))
	})(), pglock.ErrLocked)
	require.NoError(t, s.Unlock(ctx, advisory.StringKey("b")))
	in.waitValue(t, 1, "pglock.lock.held", advisoryAttr)
	_, err = d.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", s.PID())
	require.NoError(t, err)
	testdb.Receive(t, s.Lost())
	in.waitValue(t, 1, "pglock.lease.losses", advisoryAttr, cause(pglock.CauseConnectionLost))
	in.waitValue(t, 0, "pglock.lock.held", advisoryAttr)
	require.Equal(t, 2.0, in.read(t, "pglock.lock.acquire.duration", advisoryAttr, outcome(pglock.OutcomeAcquired)).count)
}

// Lock names are not attributes unless Label maps them to a bounded label.
func TestLockNamesAreAttributesOnlyThroughLabel(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	plain := newInstance(t, nil)
	labeled := newInstance(t, &otelpglock.Options{Label: func(_ pglock.Primitive, n string) string {
		prefix, _, _ := cutColon(n)
		return prefix
	}})
	for _, in := range []*instance{plain, labeled} {
		l := newLocker(t, d.Pool, &tablelock.Config{Observer: in.obs})
		for i := range 3 {
			lk, err := l.TryAcquire(ctx, fmt.Sprintf("invoice:%d", i), nil)
			require.NoError(t, err)
			require.NoError(t, lk.Release(ctx))
		}
	}
	plain.waitCount(t, 3, "pglock.lock.acquire.duration", lockAttr)
	require.False(t, plain.read(t, "pglock.lock.acquire.duration", name("invoice:1")).found)
	require.False(t, plain.read(t, "pglock.lock.acquire.duration", name("invoice")).found)
	labeled.waitCount(t, 3, "pglock.lock.acquire.duration", lockAttr, name("invoice"))
}

func cutColon(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// queryTracer is the application's pgx tracer: it records the span each query ran under, by
// the first of marks the query's text holds.
type queryTracer struct {
	marks []string
	mu    sync.Mutex
	spans map[string][]trace.SpanID
}

func (q *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	q.record(ctx, data.SQL)
	return ctx
}

func (q *queryTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A tracer that implements pgx.BatchTracer sees the queries pglock sends in batches (RunTx's
// claim goes with BEGIN), under the same ctx.
func (q *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (q *queryTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	q.record(ctx, data.SQL)
}

func (q *queryTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (q *queryTracer) record(ctx context.Context, sql string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, mark := range q.marks {
		if strings.Contains(sql, mark) {
			q.spans[mark] = append(q.spans[mark], trace.SpanContextFromContext(ctx).SpanID())
			break
		}
	}
}

func (q *queryTracer) under(word string) []trace.SpanID {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.spans[word]
}

// Deliveries are counted by outcome and mode, runs timed; a run is a span under the
// delivery's, and its function's context carries it: the application's pgx tracing sees fn's
// queries under the run's span, and pglock's own under the delivery's.
func TestJobDeliveriesAndRuns(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	tracer := &queryTracer{marks: []string{"pg_class", "ClaimJob"}, spans: map[string][]trace.SpanID{}}
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer })
	dd, err := jobs.New(pool, &jobs.Config{Observer: in.obs, Scope: "billing"})
	require.NoError(t, err)
	parentCtx, parent := in.tracer.Start(ctx, "consume")
	var fnSpan trace.SpanContext
	_, err = dd.RunTx(parentCtx, "order:1", nil, func(ctx context.Context, tx pgx.Tx) error {
		fnSpan = trace.SpanContextFromContext(ctx)
		_, err := tx.Exec(ctx, "UPDATE pg_catalog.pg_class SET relname = relname WHERE false")
		return err
	})
	require.NoError(t, err)
	parent.End()
	res, err := dd.RunTx(ctx, "order:1", nil, func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
	_, err = dd.Run(ctx, "order:2", nil, func(context.Context) error { return errors.New("refused") })
	require.Error(t, err)
	require.Panics(t, func() { dd.Run(ctx, "order:3", nil, func(context.Context) error { panic("bug") }) })

	runtx, run, billing := otelpglock.AttrMode.String("runtx"), otelpglock.AttrMode.String("run"), name("billing")
	in.waitValue(t, 1, "pglock.job.deliveries", runtx, billing, outcome(pglock.OutcomeAlreadyDone))
	in.waitValue(t, 1, "pglock.job.deliveries", runtx, billing, outcome(pglock.OutcomeRan))
	in.waitValue(t, 2, "pglock.job.deliveries", run, billing, outcome(pglock.OutcomeFailed)) // a panic is a failure
	require.False(t, in.read(t, "pglock.job.deliveries", run, outcome(pglock.OutcomeRan)).found)
	require.Equal(t, 1.0, in.read(t, "pglock.job.attempts", runtx, outcome(pglock.OutcomeRan)).value)
	require.Equal(t, 2.0, in.read(t, "pglock.job.attempts", run, outcome(pglock.OutcomeFailed)).value)
	require.Equal(t, 3.0, in.read(t, "pglock.job.run.duration", billing).count)

	var jobSpan sdktrace.ReadOnlySpan
	testdb.WaitFor(t, func() bool {
		for _, s := range in.spans.Ended() {
			if s.Name() == "pglock.job.run" {
				jobSpan = s
			}
		}
		return jobSpan != nil
	}, "the run's span")
	require.Equal(t, parent.SpanContext().SpanID(), jobSpan.Parent().SpanID(), "under the delivery's span")
	require.Equal(t, jobSpan.SpanContext().SpanID(), fnSpan.SpanID(), "fn's context carries the run's span")
	require.Equal(t, []trace.SpanID{fnSpan.SpanID()}, tracer.under("pg_class"), "fn's query, traced under the run's span")
	require.Contains(t, tracer.under("ClaimJob"), parent.SpanContext().SpanID(), "the claim, under the delivery's span")
	for _, s := range in.spans.Ended() {
		if s.Name() == "pglock.job.run" {
			require.Equal(t, jobSpan.SpanContext(), s.SpanContext(), "no span for runs without a recording parent")
		}
	}
}

// Each mode's outcomes are counted with the job mode: a superseded attempt (its delivery, its
// run and its lease), deliveries in progress under WhileRunning, and debounced deliveries and
// their run.
func TestJobModesAreCountedByTheirOutcomes(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	dd, err := jobs.New(d.NewPool(t, nil), &jobs.Config{Observer: in.obs, Scope: "sync"})
	require.NoError(t, err)
	other, err := jobs.New(d.NewPool(t, nil), &jobs.Config{Scope: "sync"})
	require.NoError(t, err)

	// Supersede: the first attempt is superseded by another instance's delivery.
	running := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := dd.Run(ctx, "user-7", &jobs.Options{Mode: jobs.Supersede}, func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		first <- err
	}()
	testdb.Receive(t, running)
	_, err = other.Run(ctx, "user-7", &jobs.Options{Mode: jobs.Supersede}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.ErrorIs(t, testdb.Receive(t, first), pglock.ErrSuperseded)

	// WhileRunning: a duplicate while the first runs is in progress.
	hold, holding := make(chan struct{}), make(chan struct{})
	singleton := make(chan error, 1)
	go func() {
		_, err := other.Run(ctx, "report", &jobs.Options{Mode: jobs.WhileRunning}, func(context.Context) error {
			close(holding)
			<-hold
			return nil
		})
		singleton <- err
	}()
	testdb.Receive(t, holding)
	res, err := dd.Run(ctx, "report", &jobs.Options{Mode: jobs.WhileRunning}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeInProgress, res.Outcome)
	close(hold)
	require.NoError(t, testdb.Receive(t, singleton))

	// Debounce: two deliveries, one run.
	for i := range 2 {
		_, err := dd.Debounce(ctx, "feed", i, jobs.DebounceOptions{Quiet: time.Millisecond, MaxWait: time.Second})
		require.NoError(t, err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		_ = dd.RunDebounced(runCtx, nil, func(context.Context, pgx.Tx, jobs.DebouncedRun) error { close(ran); return nil })
	}()
	testdb.Receive(t, ran)
	stop()

	supersede, debounce := otelpglock.AttrJobMode.String("supersede"), otelpglock.AttrJobMode.String("debounce")
	in.waitValue(t, 1, "pglock.job.deliveries", supersede, name("sync"), outcome(pglock.OutcomeSuperseded))
	in.waitValue(t, 1, "pglock.job.attempts", supersede, outcome(pglock.OutcomeSuperseded))
	in.waitValue(t, 1, "pglock.lease.losses", otelpglock.AttrPrimitive.String(string(pglock.PrimitiveJob)), supersede, cause(pglock.CauseSuperseded))
	in.waitValue(t, 1, "pglock.job.deliveries", otelpglock.AttrJobMode.String("while_running"), outcome(pglock.OutcomeInProgress))
	in.waitValue(t, 2, "pglock.job.deliveries", debounce, outcome(pglock.OutcomeDebounced))
	in.waitValue(t, 1, "pglock.job.attempts", debounce, outcome(pglock.OutcomeRan))
}

// A blocking acquisition is a span under the caller's span, and none without one; a lost lock
// adds an event to the span of the work it guarded.
func TestAcquisitionSpansOnlyUnderAParentAndLossesAsEvents(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	l := newLocker(t, d.Pool, &tablelock.Config{Observer: in.obs, TTL: time.Second})
	lk, err := l.Acquire(ctx, "unparented", nil)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))

	workCtx, work := in.tracer.Start(ctx, "work")
	err = l.WithLock(workCtx, "guarded", nil, func(ctx context.Context) error {
		_, err := d.Pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'guarded'")
		require.NoError(t, err)
		<-ctx.Done() // the next heartbeat finds the row gone
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, pglock.ErrLockLost)
	var lostEvent bool
	testdb.WaitFor(t, func() bool {
		for _, s := range in.spans.Started() {
			if s.Name() == "work" {
				for _, e := range s.Events() {
					lostEvent = lostEvent || e.Name == "pglock.lock.lost"
				}
			}
		}
		return lostEvent
	}, "the loss on the work's span")
	work.End()
	var acquires []sdktrace.ReadOnlySpan
	for _, s := range in.spans.Ended() {
		if s.Name() == "pglock.lock.acquire" {
			acquires = append(acquires, s)
		}
	}
	require.Len(t, acquires, 1, "the acquisition under no span made none")
	require.Equal(t, work.SpanContext().SpanID(), acquires[0].Parent().SpanID())
}

// Rate-limit decisions, and the events they decide by cost, are counted by limiter (a declared
// name) and decision; Wait's sleep is timed.
func TestRateLimitDecisionsAreCounted(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	lim, err := ratelimit.New(d.Pool, &ratelimit.Config{Name: "api", Observer: in.obs})
	require.NoError(t, err)
	limit := ratelimit.Limit{Rate: 10, Per: time.Second, Burst: 1}
	r, err := lim.Allow(ctx, "tenant:1", limit)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	r, err = lim.Allow(ctx, "tenant:1", limit)
	require.NoError(t, err)
	require.False(t, r.Allowed)
	require.NoError(t, lim.Wait(ctx, "tenant:1", limit))
	in.waitValue(t, 2, "pglock.ratelimit.decisions", name("api"), outcome(pglock.OutcomeAllowed))
	require.Equal(t, 1.0, in.read(t, "pglock.ratelimit.decisions", name("api"), outcome(pglock.OutcomeDenied)).value)
	in.waitCount(t, 1, "pglock.ratelimit.wait.duration", name("api")) // recorded with the decision, not before it
	require.False(t, in.read(t, "pglock.ratelimit.decisions", otelpglock.AttrKey.String("tenant:1")).found, "keys are not attributes")

	// Weighted and combined decisions count their events by cost: 3 tokens of a key and 3 of the
	// global limit, allowed; then 4 of each, denied (over what is left).
	tokens := ratelimit.Limit{Rate: 10, Per: time.Minute, Burst: 6}
	for _, n := range []int{3, 4} {
		_, err := lim.AllowAll(ctx, ratelimit.Cost{Key: "tenant:2", Limit: tokens, N: n}, ratelimit.Cost{Key: "global", Limit: tokens, N: n})
		require.NoError(t, err)
	}
	in.waitValue(t, 2+6, "pglock.ratelimit.events", name("api"), outcome(pglock.OutcomeAllowed))
	in.waitValue(t, 1+8, "pglock.ratelimit.events", name("api"), outcome(pglock.OutcomeDenied)) // told after the allowed one
}

// A leader cut off loses its leadership (counted by cause, its tenure timed); the other
// instance is elected after a vacancy measured on the database's clock, and its gauges say so.
// The other instance exports is_leader 0 from the start of its campaign, so that the "no
// leader" alert over its series fires while the election has none; and its vacancy is the
// gap on the database's clock, however long it waited before the leader was cut off.
func TestLeaderFailoverCountsTransitionsAndVacancy(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx, cancel := context.WithCancel(testdb.Context(t))
	defer cancel()
	a, b := newInstance(t, nil), newInstance(t, nil)
	poolA, partition := d.PartitionablePool(t, nil)
	elected := make(chan string, 4)
	campaign := func(pool *pgxpool.Pool, in *instance, who string) <-chan error {
		e, err := leader.New(pool, "primary", &leader.Config{TTL: 3 * time.Second, Observer: in.obs})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
				elected <- who
				<-ctx.Done()
			}})
		}()
		return done
	}
	doneA := campaign(poolA, a, "a")
	require.Equal(t, "a", testdb.Receive(t, elected))
	doneB := campaign(d.Pool, b, "b")
	election := name("primary")
	a.waitValue(t, 1, "pglock.leader.is_leader", election)
	testdb.WaitFor(t, func() bool {
		p := b.read(t, "pglock.leader.is_leader", election)
		return p.found && p.value == 0
	}, "b exports is_leader 0 while it campaigns")
	// b waits through more than a TTL of a's renewals: its vacancy must not count the wait.
	for range 4 {
		require.NoError(t, testdb.Moved(ctx, d.Pool, `SELECT expires_at FROM distributed_locks WHERE lock_name = $1`, leader.LockName("primary")))
	}
	heal := partition()
	// docs/observability.md's alert, sum by (pglock_name) (pglock_leader_is_leader) < 1, over
	// the series of the instance that remains: "no leader" until b is elected, which a's lease
	// (renewed before the cut, 3 s) holds off for seconds yet.
	p := b.read(t, "pglock.leader.is_leader", election)
	require.True(t, p.found, "b's series is there")
	require.Equal(t, 0.0, p.value, "b's series says b does not lead: with a cut off, the alert fires")
	require.Equal(t, "b", testdb.Receive(t, elected))
	b.waitValue(t, 1, "pglock.leader.is_leader", election)
	a.waitValue(t, 1, "pglock.leader.transitions", election, outcome(pglock.OutcomeLost), cause(pglock.CauseRenewalFailed))
	a.waitValue(t, 0, "pglock.leader.is_leader", election)
	a.waitCount(t, 1, "pglock.leader.tenure", election, outcome(pglock.OutcomeLost))
	vacancy := b.waitCount(t, 1, "pglock.leader.vacancy", election)
	require.Greater(t, vacancy.sum, 0.0, "the old lease expired before the new term began")
	// A poll's wait after the lease's end (at most a second); less than a TTL, whatever the
	// machine: a vacancy that counted the wait before the cut (over 3 s here) would be past it.
	require.Less(t, vacancy.sum, 3.0, "a poll after the lease's end")
	require.Greater(t, b.read(t, "pglock.leader.term", election).value, 0.0)
	require.Equal(t, 1.0, b.read(t, "pglock.leader.transitions", election, outcome(pglock.OutcomeElected)).value)
	heal()
	cancel()
	require.NoError(t, testdb.Receive(t, doneA))
	require.NoError(t, testdb.Receive(t, doneB))
	b.waitValue(t, 1, "pglock.leader.transitions", election, outcome(pglock.OutcomeResigned))
}

// An Observer that wraps otelpglock's forwards events, not the Elector's registration: the
// leader gauges then follow the events.
func TestLeaderGaugesFollowEventsThroughAWrappingObserver(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx, cancel := context.WithCancel(testdb.Context(t))
	defer cancel()
	wrapped := pglock.ObserverFunc(in.obs.Observe)
	e, err := leader.New(d.Pool, "wrapped", &leader.Config{Observer: wrapped})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) { <-ctx.Done() }})
	}()
	in.waitValue(t, 1, "pglock.leader.is_leader", name("wrapped"))
	require.Greater(t, in.read(t, "pglock.leader.term", name("wrapped")).value, 0.0)
	cancel() // Run resigns and returns
	require.NoError(t, testdb.Receive(t, done))
	in.waitValue(t, 0, "pglock.leader.term", name("wrapped"))
	require.True(t, in.read(t, "pglock.leader.is_leader", name("wrapped")).found)
}

// register adds a schedule to the database as an instance would, and stops.
func register(t *testing.T, pool *pgxpool.Pool, schedule, spec string) {
	t.Helper()
	s, err := cron.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Add(schedule, spec, nil, func(context.Context, cron.Run) error { return nil }))
	require.NoError(t, s.Start(context.Background()))
	require.NoError(t, s.Stop(context.Background()))
}

func startScheduler(t *testing.T, pool *pgxpool.Pool, in *instance, add func(s *cron.Scheduler)) {
	t.Helper()
	s, err := cron.New(pool, &cron.Config{Observer: in.obs})
	require.NoError(t, err)
	add(s)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
}

// Ticks missed while every instance was down are counted once across three instances: by the
// one whose claim recorded them.
func TestMissedTicksAreCountedOnceAcrossInstances(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	register(t, d.Pool, "yearly", "0 0 1 1 *")
	y := time.Now().UTC().Year()
	_, err := d.Pool.Exec(testdb.Context(t), `UPDATE pglock_cron_schedules SET accounted_until = $1 WHERE name = 'yearly'`,
		time.Date(y-2, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Hour))
	require.NoError(t, err)
	var instances []*instance
	for range 3 {
		in := newInstance(t, nil)
		instances = append(instances, in)
		startScheduler(t, d.NewPool(t, nil), in, func(s *cron.Scheduler) {
			require.NoError(t, s.Add("yearly", "0 0 1 1 *", nil, func(context.Context, cron.Run) error { return nil }))
		})
	}
	missed := func() float64 {
		sum := 0.0
		for _, in := range instances {
			sum += in.read(t, "pglock.cron.runs", name("yearly"), outcome(pglock.OutcomeMissed)).value
		}
		return sum
	}
	testdb.WaitFor(t, func() bool { return missed() == 3 }, "three ticks missed")
	records, err := cron.History(testdb.Context(t), d.Pool, "yearly", 10)
	require.NoError(t, err)
	require.Len(t, records, 1)
	require.Equal(t, int64(3), records[0].MissedCount)
	recorders := 0
	for _, in := range instances {
		if in.read(t, "pglock.cron.runs", outcome(pglock.OutcomeMissed)).found {
			recorders++
		}
	}
	require.Equal(t, 1, recorders, "one instance recorded the range, and only it counts it")
}

// A tick held up on purpose (its schedule's row locked past the tick) fires late: the lag is
// recorded as the database's clock has it, the run is a root span carrying its schedule and
// lag, and the last success and the clock offset are recorded.
func TestALateTickRecordsItsLagOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	runs := make(chan cron.Run, 100)
	spans := make(chan trace.SpanContext, 100)
	startScheduler(t, d.Pool, in, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("late", "@every 1s", nil, func(ctx context.Context, run cron.Run) error {
			spans <- trace.SpanContextFromContext(ctx)
			runs <- run
			return nil
		}))
	})
	first := testdb.Receive(t, runs)
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM pglock_cron_schedules WHERE name = 'late' FOR UPDATE`)
	require.NoError(t, err)
	// Hold the claim up past the next tick, by the database's clock.
	_, err = tx.Exec(ctx, `SELECT pg_sleep_until($1)`, first.ScheduledTime.Add(2500*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	late := testdb.Receive(t, runs)
	require.Equal(t, first.ScheduledTime.Add(time.Second), late.ScheduledTime, "the next tick, late")

	// Ticks go on every second, and a busy machine may run more before the metrics are read:
	// paused, the schedule runs no more, and the metrics must then match its whole history.
	require.NoError(t, cron.Pause(ctx, d.Pool, "late", "test", "test"))
	var lateLag, maxLag time.Duration
	var lag point
	testdb.WaitFor(t, func() bool {
		records, err := cron.History(ctx, d.Pool, "late", 100)
		if err != nil {
			return false
		}
		var scheduled, ran float64
		for _, r := range records {
			if r.Status != cron.StatusRan {
				continue
			}
			ran++
			if r.Kind == cron.RunKindScheduled {
				scheduled++
				maxLag = max(maxLag, r.StartedAt.Sub(r.ScheduledTime))
			}
			if r.Token == late.Token {
				lateLag = r.StartedAt.Sub(r.ScheduledTime)
			}
		}
		lag = in.read(t, "pglock.cron.fire.lag", name("late"))
		return ran >= 2 && lag.count == scheduled && in.read(t, "pglock.cron.runs", name("late"), outcome(pglock.OutcomeRan)).value == ran
	}, "the late schedule's runs counted, and their lags")
	require.Greater(t, lateLag, time.Second)
	require.InDelta(t, maxLag.Seconds(), lag.max, 0.001, "the lag is the database's: started_at − scheduled_time")
	testdb.WaitFor(t, func() bool { // recorded with the run's count, not before it
		return in.read(t, "pglock.cron.last_success", name("late")).value > float64(late.ScheduledTime.Unix())
	}, "the late run's success")
	require.True(t, in.read(t, "pglock.cron.clock.offset").found)

	root := testdb.Receive(t, spans)
	require.True(t, root.IsValid())
	var runSpan sdktrace.ReadOnlySpan
	testdb.WaitFor(t, func() bool {
		for _, s := range in.spans.Ended() {
			if s.SpanContext().SpanID() == root.SpanID() {
				runSpan = s
			}
		}
		return runSpan != nil
	}, "the run's span ended")
	require.Equal(t, "pglock.cron.run", runSpan.Name())
	require.False(t, runSpan.Parent().IsValid(), "a root span")
	attrs := attribute.NewSet(runSpan.Attributes()...)
	v, ok := attrs.Value(otelpglock.AttrName)
	require.True(t, ok)
	require.Equal(t, "late", v.AsString())
	_, ok = attrs.Value(otelpglock.AttrLag)
	require.True(t, ok)
}

// Runs skipped (a run still running) and abandoned (its instance cut off) are counted by the
// instance whose claim recorded them, so the sum over instances matches the history exactly.
func TestSkippedAndAbandonedRunsAreCountedByTheirRecorder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	opts := &cron.Options{TTL: 3 * time.Second} // renewed every second; lost only by the partition
	a, b := newInstance(t, nil), newInstance(t, nil)
	poolA, partition := d.PartitionablePool(t, nil)
	started := make(chan cron.Run, 100)
	startScheduler(t, poolA, a, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("long", "@every 1s", opts, func(ctx context.Context, run cron.Run) error {
			started <- run
			<-ctx.Done() // runs until its lease is lost
			return context.Cause(ctx)
		}))
	})
	testdb.Receive(t, started)
	startScheduler(t, d.Pool, b, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("long", "@every 1s", opts, func(context.Context, cron.Run) error { return nil }))
	})
	counted := func(o pglock.Outcome) float64 {
		return a.read(t, "pglock.cron.runs", name("long"), outcome(o)).value + b.read(t, "pglock.cron.runs", name("long"), outcome(o)).value
	}
	recorded := func(s cron.Status) float64 {
		records, err := cron.History(testdb.Context(t), d.Pool, "long", 1000)
		require.NoError(t, err)
		return float64(statuses(records)[s])
	}
	testdb.WaitFor(t, func() bool { return recorded(cron.StatusSkipped) >= 2 }, "ticks skipped while the run runs")
	heal := partition()
	defer heal()
	testdb.WaitFor(t, func() bool {
		return recorded(cron.StatusAbandoned) == 1 && counted(pglock.OutcomeAbandoned) == 1 &&
			counted(pglock.OutcomeSkipped) == recorded(cron.StatusSkipped) &&
			counted(pglock.OutcomeRan) == recorded(cron.StatusRan) && recorded(cron.StatusRan) > 0 &&
			a.read(t, "pglock.cron.run.duration", outcome(pglock.OutcomeNotRecorded)).count == 1
	}, "abandoned, skipped and ran runs counted as recorded; the abandoned run's end not counted by its runner")
	require.Zero(t, counted(pglock.OutcomeFailed), "the run recorded abandoned is not counted failed too")
	require.Equal(t, 1.0, b.read(t, "pglock.cron.runs", outcome(pglock.OutcomeAbandoned)).value, "recorded by the instance still connected")
	require.False(t, a.read(t, "pglock.cron.runs", outcome(pglock.OutcomeAbandoned)).found)
}

func statuses(records []cron.RunRecord) map[cron.Status]int {
	m := map[cron.Status]int{}
	for _, r := range records {
		m[r.Status]++
	}
	return m
}

// Renewals held up past half a heartbeat (every round trip of the Locker's pool delayed by a
// proxy) show as the renewal lag, back to 0 once they catch up.
func TestRenewalsFallingBehindShowAsTheRenewalLag(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	in := newInstance(t, nil)
	ctx := testdb.Context(t)
	pool, proxy := d.ProxiedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	l := newLocker(t, pool, &tablelock.Config{Observer: in.obs, TTL: 3 * time.Second})
	lk, err := l.TryAcquire(ctx, "slow", nil)
	require.NoError(t, err)
	require.NoError(t, lk.Extend(ctx, 3*time.Second)) // the renewal's statement is prepared
	undo, err := proxy.Slow(300, 0)
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool { return in.read(t, "pglock.lease.renewal.lag", lockAttr).value > 0.5 }, "the lag past half a heartbeat")
	require.NoError(t, undo())
	in.waitValue(t, 0, "pglock.lease.renewal.lag", lockAttr)
	require.NoError(t, lk.Err())
}

// Runs are counted by schedule and by kind: a schedule added in code by its name, a runtime
// schedule by its kind (pglock.cron.kind), and by its name only through Options.Label, since one
// per tenant is unbounded.
func TestCronRunsAreCountedByScheduleAndByKind(t *testing.T) {
	t.Parallel()
	for _, labeled := range []bool{false, true} {
		t.Run(fmt.Sprint("labeled=", labeled), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			var opts *otelpglock.Options
			if labeled {
				opts = &otelpglock.Options{Label: func(p pglock.Primitive, name string) string {
					if p == pglock.PrimitiveCron && strings.HasPrefix(name, "tenant-") {
						return "tenants"
					}
					return ""
				}}
			}
			in := newInstance(t, opts)
			startScheduler(t, d.Pool, in, func(s *cron.Scheduler) {
				require.NoError(t, s.Add("in-code", "@every 1s", nil, func(context.Context, cron.Run) error { return nil }))
				require.NoError(t, s.Handle("report", func(context.Context, cron.Run) error { return nil }))
			})
			for _, tenant := range []string{"tenant-1", "tenant-2"} {
				require.NoError(t, cron.Define(testdb.Context(t), d.Pool, cron.Definition{Name: tenant, Kind: "report", Spec: "@every 1s"}, nil))
			}
			kind := otelpglock.AttrScheduleKind.String("report")
			testdb.WaitFor(t, func() bool {
				return in.read(t, "pglock.cron.runs", kind, outcome(pglock.OutcomeRan)).value >= 4 &&
					in.read(t, "pglock.cron.runs", name("in-code"), outcome(pglock.OutcomeRan)).value >= 2
			}, "runs of both")
			require.False(t, in.read(t, "pglock.cron.runs", name("in-code"), kind).found, "a schedule in code has no kind")
			for _, metric := range []string{"pglock.cron.runs", "pglock.cron.run.duration", "pglock.cron.fire.lag", "pglock.cron.last_success"} {
				require.True(t, in.read(t, metric, kind).found, metric)
				for _, tenant := range []string{"tenant-1", "tenant-2"} {
					require.False(t, in.read(t, metric, name(tenant)).found, "%s: a runtime schedule's name is no attribute", metric)
				}
				require.Equal(t, labeled, in.read(t, metric, name("tenants"), kind).found, "%s: its label is", metric)
			}
		})
	}
}
