package otelpglock

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pglock/pglock"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/pglock/pglock/otelpglock"

// The default bucket boundaries, in seconds. Waits (acquisitions, rate-limit waits, fire lag,
// vacancies) run from a millisecond to ten minutes; runs (jobs, cron runs, holds, tenures) from
// ten milliseconds to a day.
var (
	DefaultWaitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	DefaultRunBuckets  = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 86400}
)

// The attributes of pglock's instruments and spans.
const (
	AttrPrimitive = attribute.Key("pglock.primitive")
	AttrName      = attribute.Key("pglock.name") // a declared name, or Options.Label's label
	AttrKey       = attribute.Key("pglock.key")  // Options.Label's label of a job or rate-limit key
	AttrOutcome   = attribute.Key("pglock.outcome")
	AttrCause     = attribute.Key("pglock.cause")
	AttrMode      = attribute.Key("pglock.mode")
	AttrBlocking  = attribute.Key("pglock.blocking")
	AttrToken     = attribute.Key("pglock.token")
	AttrAttempt   = attribute.Key("pglock.attempt")
	AttrScheduled = attribute.Key("pglock.scheduled_time")
	AttrLag       = attribute.Key("pglock.lag_seconds")
	// AttrScheduleKind is a runtime schedule's kind (cron.Definition.Kind), bounded as its
	// handlers are; the schedule's own name is an attribute only through Options.Label.
	AttrScheduleKind = attribute.Key("pglock.cron.kind")
	// AttrJobMode is a job delivery's mode (jobs.Options.Mode) when not the default:
	// "while_running", "per_period", "supersede", or "debounce" for jobs.Debounce.
	AttrJobMode = attribute.Key("pglock.job.mode")
)

// Options configure an Observer. A nil *Options, and every zero field, means the default.
type Options struct {
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// Label maps a lock's name, an advisory key (as advisory.Key.String shows it), a job's key,
	// a rate-limit key or a runtime schedule's name (PrimitiveCron) to a bounded label
	// ("invoice:123" to "invoice", "tenant-42" to a plan's name), an attribute of their metrics;
	// "" leaves it out. Such names are unbounded: none is an attribute by default. Names
	// declared in code (schedules added in code, elections, semaphores, limiters, job scopes)
	// always are. Default: none.
	Label func(p pglock.Primitive, name string) string

	// WaitBuckets and RunBuckets are the histograms' bucket boundaries, in seconds.
	// Default: DefaultWaitBuckets, DefaultRunBuckets.
	WaitBuckets, RunBuckets []float64
}

// Observer is a [pglock.Observer] that records metrics and spans. Safe for concurrent use; one
// serves every package of a process.
type Observer struct {
	tracer trace.Tracer
	label  func(pglock.Primitive, string) string

	acquireDuration, heldDuration          metric.Float64Histogram
	held, semaphorePermits                 metric.Int64UpDownCounter
	losses, renewalFailures, fenceRefusals metric.Int64Counter
	deliveries, attempts                   metric.Int64Counter
	jobRunDuration                         metric.Float64Histogram
	cronRuns                               metric.Int64Counter
	cronRunDuration, cronLag               metric.Float64Histogram
	clockOffset, lastSuccess, renewalLag   metric.Float64Gauge
	leadersMu                              sync.Mutex
	leaders                                map[*leadership]struct{} // the Electors campaigning, read at each export
	toldTerms                              map[string]int64         // by EventLeader, for elections no Elector registered here
	transitions                            metric.Int64Counter
	tenure, vacancy                        metric.Float64Histogram
	rateDecisions, rateEvents              metric.Int64Counter
	rateWait                               metric.Float64Histogram
	attrs                                  sync.Map // attrKey → metric.MeasurementOption
}

var _ pglock.Observer = (*Observer)(nil)

// New returns an Observer with its instruments made.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.WaitBuckets == nil {
		o.WaitBuckets = DefaultWaitBuckets
	}
	if o.RunBuckets == nil {
		o.RunBuckets = DefaultRunBuckets
	}
	m := o.MeterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(pglock.Version))
	obs := &Observer{tracer: o.TracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(pglock.Version)), label: o.Label}
	b := builder{m: m}
	waits, runs := metric.WithExplicitBucketBoundaries(o.WaitBuckets...), metric.WithExplicitBucketBoundaries(o.RunBuckets...)

	obs.acquireDuration = b.histogram("pglock.lock.acquire.duration", "Time to acquire a lock, semaphore place or advisory lock, by outcome.", waits)
	obs.heldDuration = b.histogram("pglock.lock.held.duration", "Time a lock was held, by how it ended (released, lost, expired).", runs)
	obs.held = b.upDown("pglock.lock.held", "{lock}", "Locks, semaphore places and advisory locks held now.")
	obs.semaphorePermits = b.upDown("pglock.semaphore.permits.held", "{permit}", "Places of a semaphore held now by this process.")
	obs.losses = b.counter("pglock.lease.losses", "{loss}", "Locks, leases and advisory locks lost while held, by cause.")
	obs.renewalFailures = b.counter("pglock.lease.renewal.failures", "{failure}", "Renewals that failed and will be retried.")
	obs.renewalLag = b.gauge("pglock.lease.renewal.lag", "s", "How far the renewals of the leases held are behind, while past half a heartbeat (acquisitions then fail with ErrSaturated); 0 once they catch up.")
	obs.fenceRefusals = b.counter("pglock.fence.refusals", "{refusal}", "Fence checks that refused a token no longer current.")
	obs.deliveries = b.counter("pglock.job.deliveries", "{delivery}", "Job deliveries, by outcome, mode and job mode.")
	obs.attempts = b.counter("pglock.job.attempts", "{attempt}", "Job attempts that ran the function, by outcome, mode and job mode.")
	obs.jobRunDuration = b.histogram("pglock.job.run.duration", "Time a job's function ran.", runs)
	obs.cronRuns = b.counter("pglock.cron.runs", "{run}", "Cron ticks accounted for, by status: counted once in the fleet.")
	obs.cronRunDuration = b.histogram("pglock.cron.run.duration", "Time a cron run's function ran.", runs)
	obs.cronLag = b.histogram("pglock.cron.fire.lag", "A cron run's start minus its scheduled time, on the database's clock.", waits)
	obs.clockOffset = b.gauge("pglock.cron.clock.offset", "s", "The database's clock minus this host's, as last measured.")
	obs.lastSuccess = b.gauge("pglock.cron.last_success", "s", "When a schedule's last successful run ended, Unix time on the database's clock.")
	obs.leaders, obs.toldTerms = map[*leadership]struct{}{}, map[string]int64{}
	isLeader := b.observedIntGauge("pglock.leader.is_leader", "", "1 while this process leads the election, else 0, for as long as it campaigns.")
	term := b.observedIntGauge("pglock.leader.term", "{term}", "The term this process leads in (0: not leading), for as long as it campaigns.")
	if b.err == nil {
		_, err := m.RegisterCallback(func(_ context.Context, m metric.Observer) error {
			for election, t := range obs.terms() {
				attrs, leads := obs.attributes(attrKey{name: election}), int64(0)
				if t != 0 {
					leads = 1
				}
				m.ObserveInt64(isLeader, leads, attrs)
				m.ObserveInt64(term, t, attrs)
			}
			return nil
		}, isLeader, term)
		b.keep(err)
	}
	obs.transitions = b.counter("pglock.leader.transitions", "{transition}", "Leadership gained or ended, by transition and cause.")
	obs.tenure = b.histogram("pglock.leader.tenure", "How long a leadership lasted.", runs)
	obs.vacancy = b.histogram("pglock.leader.vacancy", "Time an election had no leader before this one, on the database's clock.", waits)
	obs.rateDecisions = b.counter("pglock.ratelimit.decisions", "{decision}", "Rate-limit decisions, allowed or denied.")
	obs.rateEvents = b.counter("pglock.ratelimit.events", "{event}", "Events rate limits decided, weighted by their cost (every limit's of a combined decision), allowed or denied.")
	obs.rateWait = b.histogram("pglock.ratelimit.wait.duration", "Time Wait slept for its slot.", waits)
	if b.err != nil {
		return nil, b.err
	}
	return obs, nil
}

// builder makes instruments, keeping the first error.
type builder struct {
	m   metric.Meter
	err error
}

func (b *builder) keep(err error) {
	b.err = errors.Join(b.err, err)
}

func (b *builder) histogram(name, desc string, buckets metric.HistogramOption) metric.Float64Histogram {
	h, err := b.m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), buckets)
	b.keep(err)
	return h
}

func (b *builder) counter(name, unit, desc string) metric.Int64Counter {
	c, err := b.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(err)
	return c
}

func (b *builder) upDown(name, unit, desc string) metric.Int64UpDownCounter {
	c, err := b.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(err)
	return c
}

func (b *builder) gauge(name, unit, desc string) metric.Float64Gauge {
	g, err := b.m.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(err)
	return g
}

func (b *builder) observedIntGauge(name, unit, desc string) metric.Int64ObservableGauge {
	g, err := b.m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	b.keep(err)
	return g
}

// leadership is an Elector's, registered for the whole of its Run.
type leadership struct {
	election string
	term     func() int64
}

// ReadLeadership has pglock.leader.is_leader and pglock.leader.term read election's Elector (its
// term, 0 when it does not lead) at each export, until stop: a candidate that never led
// exports 0, so that "no leader" can be told from "no data" (docs/observability.md's alert).
func (o *Observer) ReadLeadership(election string, term func() int64) (stop func()) {
	r := &leadership{election: election, term: term}
	o.leadersMu.Lock()
	o.leaders[r] = struct{}{}
	o.leadersMu.Unlock()
	return sync.OnceFunc(func() {
		o.leadersMu.Lock()
		delete(o.leaders, r)
		o.leadersMu.Unlock()
	})
}

// terms is the term each election campaigned in here is led in by this process (the largest,
// if it runs more than one Elector of it), 0 where it does not lead: read from the Electors
// registered, else as the events told it (an Observer that wraps this one forwards events, not
// registrations).
func (o *Observer) terms() map[string]int64 {
	o.leadersMu.Lock()
	defer o.leadersMu.Unlock()
	terms := make(map[string]int64, len(o.leaders)+len(o.toldTerms))
	for r := range o.leaders {
		terms[r.election] = max(terms[r.election], r.term())
	}
	for election, term := range o.toldTerms {
		if _, read := terms[election]; !read {
			terms[election] = term
		}
	}
	return terms
}

// tellTerm records the term an event says this process leads election in (0: none).
func (o *Observer) tellTerm(election string, term int64) {
	o.leadersMu.Lock()
	o.toldTerms[election] = term
	o.leadersMu.Unlock()
}

var _ pglock.LeadershipReader = (*Observer)(nil)

// Observe records e's metrics, its span when it is a blocking wait under a sampled span, and
// ends the span Begin started for a run.
func (o *Observer) Observe(ctx context.Context, e pglock.Event) {
	switch e.Kind {
	case pglock.EventAcquire:
		o.acquireDuration.Record(ctx, e.Wait.Seconds(), o.attributes(attrKey{primitive: e.Primitive, outcome: e.Outcome, name: o.lockName(e)}))
		if e.Outcome == pglock.OutcomeAcquired {
			o.held.Add(ctx, 1, o.attributes(attrKey{primitive: e.Primitive, name: o.lockName(e)}))
			if e.Primitive == pglock.PrimitiveSemaphore {
				o.semaphorePermits.Add(ctx, e.Count, o.attributes(attrKey{name: e.Name}))
			}
		}
		if e.Blocking {
			o.waitSpan(ctx, "pglock."+string(e.Primitive)+".acquire", e)
		}
	case pglock.EventReleased, pglock.EventLost:
		if e.Kind == pglock.EventLost {
			o.losses.Add(ctx, 1, o.attributes(attrKey{primitive: e.Primitive, cause: e.Cause, name: o.lockName(e), kind: e.ScheduleKind, jobMode: e.Uniqueness}))
			trace.SpanFromContext(ctx).AddEvent("pglock."+string(e.Primitive)+".lost", trace.WithTimestamp(e.Time),
				trace.WithAttributes(AttrCause.String(string(e.Cause)), AttrToken.Int64(e.Token)))
		}
		if !isLock(e.Primitive) {
			return // a job's or cron run's lease: its run's event ends it
		}
		o.held.Add(ctx, -1, o.attributes(attrKey{primitive: e.Primitive, name: o.lockName(e)}))
		if e.Primitive == pglock.PrimitiveSemaphore {
			o.semaphorePermits.Add(ctx, -e.Count, o.attributes(attrKey{name: e.Name}))
		}
		ended := pglock.OutcomeLost
		switch {
		case e.Kind == pglock.EventReleased:
			ended = "released"
		case e.Cause == pglock.CauseExpired:
			ended = "expired"
		}
		o.heldDuration.Record(ctx, e.Held.Seconds(), o.attributes(attrKey{primitive: e.Primitive, outcome: ended}))
	case pglock.EventRenewFailed:
		o.renewalFailures.Add(ctx, 1, o.attributes(attrKey{primitive: e.Primitive}))
	case pglock.EventFenceRefused:
		o.fenceRefusals.Add(ctx, 1, o.attributes(attrKey{primitive: e.Primitive}))
	case pglock.EventJobDelivery:
		o.deliveries.Add(ctx, 1, o.attributes(attrKey{outcome: e.Outcome, mode: e.Mode, name: e.Name, key: o.labelOf(e.Primitive, e.Key), jobMode: e.Uniqueness}))
	case pglock.EventJobRun:
		a := o.attributes(attrKey{outcome: e.Outcome, mode: e.Mode, name: e.Name, jobMode: e.Uniqueness})
		o.attempts.Add(ctx, 1, a)
		o.jobRunDuration.Record(ctx, e.Run.Seconds(), a)
		o.endRun(ctx, e)
	case pglock.EventCronRun:
		schedule, kind := o.lockName(e), e.ScheduleKind
		if e.Outcome != pglock.OutcomeNotRecorded { // the instance that recorded it abandoned counts it
			n := max(e.Count, 1) // a missed range counts its ticks (−1: too many to count, one)
			o.cronRuns.Add(ctx, n, o.attributes(attrKey{outcome: e.Outcome, name: schedule, kind: kind}))
		}
		if !e.Started.IsZero() {
			if e.Mode == pglock.ModeScheduled { // manual, backfilled and caught-up runs are late by design
				o.cronLag.Record(ctx, e.Lag.Seconds(), o.attributes(attrKey{name: schedule, kind: kind}))
			}
			o.cronRunDuration.Record(ctx, e.Run.Seconds(), o.attributes(attrKey{outcome: e.Outcome, name: schedule, kind: kind}))
		}
		if e.Outcome == pglock.OutcomeRan {
			finished := e.Started.Add(e.Run)
			o.lastSuccess.Record(ctx, float64(finished.UnixNano())/1e9, o.attributes(attrKey{name: schedule, kind: kind}))
		}
		o.endRun(ctx, e)
	case pglock.EventClockOffset:
		o.clockOffset.Record(ctx, e.Offset.Seconds())
	case pglock.EventRenewalLag:
		lag := e.Lag
		if e.Outcome != pglock.OutcomeError {
			lag = 0 // caught up
		}
		o.renewalLag.Record(ctx, lag.Seconds(), o.attributes(attrKey{primitive: e.Primitive}))
	case pglock.EventLeader:
		name := o.attributes(attrKey{name: e.Name})
		o.transitions.Add(ctx, 1, o.attributes(attrKey{outcome: e.Outcome, cause: e.Cause, name: e.Name}))
		if e.Outcome == pglock.OutcomeElected {
			o.tellTerm(e.Name, e.Token)
			o.vacancy.Record(ctx, e.Vacancy.Seconds(), name)
			return
		}
		o.tellTerm(e.Name, 0)
		o.tenure.Record(ctx, e.Held.Seconds(), o.attributes(attrKey{outcome: e.Outcome, name: e.Name}))
		if e.Outcome == pglock.OutcomeLost {
			trace.SpanFromContext(ctx).AddEvent("pglock.leader.lost", trace.WithTimestamp(e.Time),
				trace.WithAttributes(AttrCause.String(string(e.Cause)), AttrToken.Int64(e.Token)))
		}
	case pglock.EventRateLimit:
		a := o.attributes(attrKey{outcome: e.Outcome, name: e.Name, key: o.labelOf(e.Primitive, e.Key)})
		o.rateDecisions.Add(ctx, 1, a)
		o.rateEvents.Add(ctx, e.Count, a)
		if e.Wait > 0 {
			o.rateWait.Record(ctx, e.Wait.Seconds(), a)
			o.waitSpan(ctx, "pglock.ratelimit.wait", e)
		}
	}
}

func isLock(p pglock.Primitive) bool {
	return p == pglock.PrimitiveLock || p == pglock.PrimitiveSemaphore || p == pglock.PrimitiveAdvisory
}

// lockName is the name attribute of a lease's or run's metrics: a lock's, advisory key's or
// runtime schedule's label, if any; the name itself for the primitives whose names code
// declares (a semaphore, a job's scope, a schedule added in code, an election).
func (o *Observer) lockName(e pglock.Event) string {
	if e.Primitive == pglock.PrimitiveLock || e.Primitive == pglock.PrimitiveAdvisory || e.ScheduleKind != "" {
		return o.labelOf(e.Primitive, e.Name)
	}
	return e.Name
}

func (o *Observer) labelOf(p pglock.Primitive, name string) string {
	if o.label == nil || name == "" {
		return ""
	}
	return o.label(p, name)
}

// attrKey is a metric's attributes; "" leaves one out.
type attrKey struct {
	primitive pglock.Primitive
	outcome   pglock.Outcome
	cause     pglock.Cause
	mode      pglock.Mode
	name, key string
	kind      string // a runtime schedule's
	jobMode   string // a job delivery's uniqueness
}

// attributes returns k's attributes as an option, made once per distinct set.
func (o *Observer) attributes(k attrKey) metric.MeasurementOption {
	if opt, ok := o.attrs.Load(k); ok {
		return opt.(metric.MeasurementOption)
	}
	kv := make([]attribute.KeyValue, 0, 8)
	for _, a := range []struct {
		key   attribute.Key
		value string
	}{{AttrPrimitive, string(k.primitive)}, {AttrOutcome, string(k.outcome)}, {AttrCause, string(k.cause)},
		{AttrMode, string(k.mode)}, {AttrName, k.name}, {AttrKey, k.key}, {AttrScheduleKind, k.kind}, {AttrJobMode, k.jobMode}} {
		if a.value != "" {
			kv = append(kv, a.key.String(a.value))
		}
	}
	opt, _ := o.attrs.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return opt.(metric.MeasurementOption)
}

// waitSpan records a wait that has ended as a span under ctx's, if that one is sampled: from
// the wait's start to its end.
func (o *Observer) waitSpan(ctx context.Context, name string, e pglock.Event) {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return
	}
	attrs := []attribute.KeyValue{AttrPrimitive.String(string(e.Primitive)), AttrOutcome.String(string(e.Outcome))}
	if label := o.lockName(e); label != "" {
		attrs = append(attrs, AttrName.String(label))
	}
	if e.Token != 0 {
		attrs = append(attrs, AttrToken.Int64(e.Token))
	}
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(e.Time.Add(-e.Wait)), trace.WithAttributes(attrs...))
	setStatus(span, e)
	span.End(trace.WithTimestamp(e.Time))
}

func setStatus(span trace.Span, e pglock.Event) {
	switch e.Outcome {
	case pglock.OutcomeAcquired, pglock.OutcomeRan, pglock.OutcomeAllowed:
	default:
		msg := string(e.Outcome)
		if e.Err != nil {
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
}

// runSpan marks the spans Begin started, so that the run's event ends its own span only.
type runSpan struct{}

// Begin starts the span of a job's run (under ctx's span, if it is recording) or of a cron
// run (a root span), and returns ctx carrying it.
func (o *Observer) Begin(ctx context.Context, e pglock.Event) context.Context {
	var opts []trace.SpanStartOption
	var name string
	switch e.Kind {
	case pglock.EventJobRun:
		if !trace.SpanFromContext(ctx).IsRecording() {
			return ctx
		}
		name = "pglock.job.run"
		opts = append(opts, trace.WithAttributes(AttrName.String(e.Name), AttrMode.String(string(e.Mode)),
			AttrAttempt.Int(e.Attempt), AttrToken.Int64(e.Token)))
		if label := o.labelOf(e.Primitive, e.Key); label != "" {
			opts = append(opts, trace.WithAttributes(AttrKey.String(label)))
		}
	case pglock.EventCronRun:
		name = "pglock.cron.run"
		opts = append(opts, trace.WithNewRoot(), trace.WithAttributes(AttrName.String(e.Name),
			AttrScheduled.String(e.Scheduled.UTC().Format(time.RFC3339Nano)), AttrLag.Float64(e.Lag.Seconds()),
			AttrAttempt.Int(e.Attempt), AttrToken.Int64(e.Token)))
		if e.ScheduleKind != "" { // a span's attributes make no series: its name may be there
			opts = append(opts, trace.WithAttributes(AttrScheduleKind.String(e.ScheduleKind)))
		}
	default:
		return ctx
	}
	ctx, span := o.tracer.Start(ctx, name, opts...)
	return context.WithValue(ctx, runSpan{}, span)
}

// endRun ends the span Begin started for the run e ends, if it started one.
func (o *Observer) endRun(ctx context.Context, e pglock.Event) {
	span, ok := ctx.Value(runSpan{}).(trace.Span)
	if !ok {
		return
	}
	span.SetAttributes(AttrOutcome.String(string(e.Outcome)))
	setStatus(span, e)
	span.End(trace.WithTimestamp(e.Time))
}
