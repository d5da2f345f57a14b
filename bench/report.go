package main

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// report collects the sections of docs/benchmarks.md as the scenarios finish.
type report struct {
	machine  machine
	notes    []string
	designs  []design
	sections []string
	handoffs []handoffResult // for the charts
	dedup    [][]dedupResult // per number of workers, in the ways' order
	leases   []leaseResult   // for the chart: none held first, then each size by each way
	elapsed  time.Duration
	// figures[design][column]: each lock design's headline figures, for the side-by-side table
	figures map[string]map[string]string

	peersMu     sync.Mutex
	peerFailing map[string]*failures // by scenario and design: "scenario: design"
	peerOrder   []string
}

// failed decides what an operation's error does to the run: a peer's is recorded for the page
// (errPeerFailed: the operation measured nothing) and the run goes on; pglock's own stop it.
func (r *report) failed(scenario string, d design, err error) error {
	if !d.peer || errors.Is(err, errHarness) {
		return fmt.Errorf("%s: %w", d.name, err)
	}
	key := scenario + ": " + d.name
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	if r.peerFailing == nil {
		r.peerFailing = map[string]*failures{}
	}
	f := r.peerFailing[key]
	if f == nil {
		f = &failures{}
		r.peerFailing[key] = f
		r.peerOrder = append(r.peerOrder, key)
	}
	f.record(err)
	return errPeerFailed
}

// peerNotes says, for the page, what each peer failed at.
func (r *report) peerNotes() []string {
	var notes []string
	for _, key := range r.peerOrder {
		f := r.peerFailing[key]
		notes = append(notes, fmt.Sprintf("%s failed %d times (its figures count only what succeeded); the first error: %v.", key, f.n, f.first))
	}
	return notes
}

func ms(d time.Duration) string {
	v := float64(d.Microseconds()) / 1e3
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.0f ms", v)
	default:
		return fmt.Sprintf("%.2f s", v/1e3)
	}
}

func ratio(a, b float64) string {
	if b == 0 || a == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func perSecond(v float64) string { return fmt.Sprintf("%.0f", v) }

func mdTable(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

func (r *report) add(title, intro, table string) {
	r.sections = append(r.sections, "## "+title+"\n\n"+intro+"\n\n"+table)
}

// figure records one of a design's headline figures, for sideBySide.
func (r *report) figure(design, column, value string) {
	if r.figures == nil {
		r.figures = map[string]map[string]string{}
	}
	if r.figures[design] == nil {
		r.figures[design] = map[string]string{}
	}
	r.figures[design][column] = value
}

// The side-by-side table's columns, in order.
var sideBySideColumns = []string{"uncontended acquire + release, p50", "failed try, p50", "4-way handoff, acquisitions/s",
	"handed to the next waiter", "longest wait", "1,000 waiters: time to serve them"}

// sideBySide is the lock designs' headline figures from this run's scenarios in one table: the
// PostgreSQL designs and the Redis ones (docs/redis.md's decision table quotes it).
func (r *report) sideBySide() {
	var rows [][]string
	for _, d := range r.designs {
		f := r.figures[d.name]
		if f == nil {
			continue
		}
		row := []string{d.name}
		for _, c := range sideBySideColumns {
			row = append(row, orNone(f[c], "–"))
		}
		rows = append(rows, row)
	}
	r.sections = append([]string{"## Side by side\n\nEach lock design's figures from the scenarios below, measured in this run: PostgreSQL's designs and Redis's (bsm/redislock and pglock's `redislock.Locker` on one server; pglock's `redislock.Redlock` and go-redsync/redsync on three). [redis.md](redis.md) says what each of them guarantees.\n\n" +
		mdTable(append([]string{"design"}, sideBySideColumns...), rows)}, r.sections...)
}

// index is where the design called name is in designs, or -1.
func index(designs []design, name string) int {
	return slices.IndexFunc(designs, func(d design) bool { return d.name == name })
}

// latencyTable: p50, p99 and operations per second of each design, its median against raw
// SQL's, and tablelock's median against its.
// column names the side-by-side table's column of its p50s ("" for none).
func (r *report) latencyTable(title, intro, column string, designs []design, results []latency) {
	raw, tl := results[index(designs, rawSQL.name)], results[index(designs, tablelockDesign.name)]
	var rows [][]string
	for i, d := range designs {
		l := results[i]
		rows = append(rows, []string{d.name, ms(l.p50), ms(l.p99), perSecond(l.perSecond),
			ratio(float64(l.p50), float64(raw.p50)), ratio(float64(tl.p50), float64(l.p50))})
		if column != "" {
			r.figure(d.name, column, ms(l.p50))
		}
	}
	n := len(results[0].samples)
	r.add(title, intro+fmt.Sprintf(" %d rounds.", n), mdTable(
		[]string{"design", "p50", "p99", "ops/s (one caller)", "p50 ÷ raw SQL's", "tablelock's p50 ÷ this"}, rows))
}

func (r *report) manyLocksTable(designs []design, small, big []latency) {
	raw := index(designs, rawSQL.name)
	var rows [][]string
	for i, d := range designs {
		rows = append(rows, []string{d.name, ms(small[i].p50), ms(big[i].p50), ms(small[i].p99), ms(big[i].p99),
			ratio(float64(big[i].p50), float64(small[i].p50)), ratio(float64(big[i].p50), float64(big[raw].p50))})
	}
	r.add("Acquire among 1k and 1M live locks",
		fmt.Sprintf("The uncontended try and release of one name while 1,000 or 1,000,000 other locks are live: two databases on one server (for Redis, two logical databases of one server) measured in the same rounds, %d of them. Advisory locks have no rows, and PostgreSQL's lock table could not hold a million of them (`max_locks_per_transaction`), so they are left out here.", len(small[0].samples)),
		mdTable([]string{"design", "p50 at 1k", "p50 at 1M", "p99 at 1k", "p99 at 1M", "p50 at 1M ÷ at 1k", "p50 at 1M ÷ raw SQL's"}, rows))
}

func (r *report) handoffSection(results []handoffResult) {
	r.handoffs = results
	raw, tl := results[0], results[index(r.designs, tablelockDesign.name)]
	throughput := func(h handoffResult) float64 { return float64(h.acquisitions) / h.elapsed.Seconds() }
	var rows [][]string
	for _, h := range results {
		l := summarize(h.waits)
		shares := make([]string, len(h.perWorker))
		for w, c := range h.perWorker {
			shares[w] = fmt.Sprintf("%.0f", 100*float64(c)/float64(max(h.acquisitions, 1)))
		}
		longest := "–" // a peer that failed every acquisition
		if len(l.samples) > 0 {
			longest = ms(l.samples[len(l.samples)-1])
		}
		if h.unfinished > 0 {
			longest = "≥ " + longest // a wait cut short by the slot's end may be the longest
		}
		r.figure(h.design, sideBySideColumns[2], perSecond(throughput(h)))
		r.figure(h.design, sideBySideColumns[3], fmt.Sprintf("%.0f %%", 100*float64(h.handoffs)/float64(max(h.acquisitions-1, 1))))
		r.figure(h.design, sideBySideColumns[4], longest)
		rows = append(rows, []string{h.design, perSecond(throughput(h)), ms(l.p50), ms(l.p99), longest, fmt.Sprint(h.unfinished),
			strings.Join(shares, " / "), fmt.Sprintf("%.0f %%", 100*float64(h.handoffs)/float64(max(h.acquisitions-1, 1))),
			fmt.Sprint(h.overlaps), ratio(throughput(h), throughput(raw)), ratio(throughput(tl), throughput(h))})
	}
	r.add("4-way contended handoff",
		fmt.Sprintf("Four instances (a pool each) contend for one name: each waits for it, steps in and out at once, and asks again, for %s per design per round, %d rounds, designs interleaved. *Handoffs* are acquisitions by another worker than the one before; a fair queue hands off nearly every time, a design whose releaser can take the lock straight back hands off rarely. *Overlaps* counts acquisitions made while another worker was still inside (a cheap check: the critical sections are empty). A wait still open when a slot ends counts at its length so far (*waits cut short*), so the longest wait is then a lower bound. Raw SQL waits here with a blocking `pg_advisory_lock`, the cheapest wait PostgreSQL offers, like pglock advisory: in memory, nothing written, nothing that survives the server. tablelock's handoff is durable: the new holder and its fencing token are committed before it is told (tablelock's own `BenchmarkHandoff`, in `make bench-packages`, compares it with the floor of a durable queue written by hand).", handoffSlot, handoffRounds),
		mdTable([]string{"design", "acquisitions/s", "p50 wait", "p99 wait", "longest wait", "waits cut short", "shares (%)", "handoffs", "overlaps", "throughput ÷ raw SQL's", "tablelock's throughput ÷ this"}, rows)+
			"\n![Each acquisition's wait, per design](bench/handoff-waits.png)\n\n![Each worker's share of the acquisitions, per design](bench/handoff-shares.png)\n")
}

func (r *report) waitersTable(results []waitersResult) {
	var rows [][]string
	for _, w := range results {
		served := ms(w.elapsed)
		if w.served < waiters*waitersRounds {
			served = fmt.Sprintf("%d of %d served in %s", w.served, waiters*waitersRounds, ms(w.elapsed))
		}
		r.figure(w.design, sideBySideColumns[5], served)
		rows = append(rows, []string{w.design, fmt.Sprintf("%d of %d", w.served, waiters*waitersRounds), ms(w.elapsed),
			perSecond(float64(w.served) / w.elapsed.Seconds()), fmt.Sprint(w.connections),
			fmt.Sprintf("%.1f", float64(w.requests)/float64(max(w.served, 1)))})
	}
	r.add("1,000 waiters in one process",
		fmt.Sprintf("One process, %d goroutines waiting for one name; when the holder lets go, each takes the lock once and lets go at once; %d rounds, designs in turn, the order rotated. Every design may use %d connections (Redis: a client pool of %d); designs that wait on a pinned session (raw SQL's `pg_advisory_lock`, pglock advisory) need one per waiter, so the rest queue for a connection in the client (pglock advisory's holder keeps one of the %d; tablelock's one LISTEN connection comes on top). *Connections* is the most the design had open to the server at once. *Requests per acquisition* is what the server did from the release on, per lock taken, from its own counters: PostgreSQL's transactions (`pg_stat_database`), Redis's commands (`total_commands_processed`). For the polling designs it is their polls: the wake-ups a release costs; for the others, the acquisition, release and any session a waiter opens. Waiters still waiting %s after the release are not served.", waiters, waitersRounds, waitersPool, waitersPool, waitersPool, waitersTimeout),
		mdTable([]string{"design", "served", "time to serve them", "acquisitions/s", "connections", "requests per acquisition"}, rows))
}

func (r *report) dedupTable() {
	var rows, sqlRows, batchRows [][]string
	for _, results := range r.dedup {
		way := func(prefix string) dedupResult {
			for _, d := range results {
				if strings.HasPrefix(d.way, prefix) {
					return d
				}
			}
			panic("bench: no dedup way named " + prefix)
		}
		raw, inbox, runTx := way("raw INSERT transaction (no"), way("hand-written inbox"), way("pglock jobs.RunTx")
		rawSQL, runTxSQL, batch := way("raw INSERT transaction on database/sql"), way("pglock jobs.RunTxSQL"), way("pglock jobs.RunTxBatch")
		batchRows = append(batchRows, []string{fmt.Sprint(batch.workers), fmt.Sprint(batch.batch),
			ratio(batch.perSecond(), runTx.perSecond()), ratio(batch.perSecond(), inbox.perSecond())})
		for _, d := range results {
			rows = append(rows, []string{d.way, fmt.Sprint(d.workers), perSecond(d.perSecond()), ms(d.latency.p50), ms(d.latency.p99),
				ratio(d.perSecond(), raw.perSecond()), ratio(d.perSecond(), inbox.perSecond()),
				fmt.Sprintf("%.0f", d.walPerDelivery()), ratio(d.walPerDelivery(), inbox.walPerDelivery())})
		}
		sqlRows = append(sqlRows, []string{fmt.Sprint(runTx.workers),
			ratio(runTxSQL.latency.p50.Seconds(), runTx.latency.p50.Seconds()), ratio(runTx.perSecond(), runTxSQL.perSecond()),
			ratio(runTxSQL.latency.p50.Seconds(), rawSQL.latency.p50.Seconds()), ratio(rawSQL.perSecond(), runTxSQL.perSecond())})
	}
	r.add("Deduplicated delivery",
		fmt.Sprintf("%d instances deliver distinct keys, each delivery's effect one INSERT, in seven ways: the INSERT in a raw transaction (BEGIN, INSERT, COMMIT: no deduplication at all); behind a hand-written inbox table, what a team writes to drop duplicates (BEGIN, `INSERT INTO inbox (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING key`, the INSERT, COMMIT; a table with the key alone, which nothing ever empties); through `jobs.RunTx` (the claim, the effect, and the outcome with COMMIT, in one transaction); behind River's unique insert, how River's users drop duplicates (BEGIN, `InsertTx` of a job unique by its arguments, the delivery's key, then the INSERT, COMMIT; River's own migrations in a schema of their own, no worker running); and on `database/sql` over the same pools (pgx's stdlib, `stdlib.OpenDBFromPool`): the raw transaction, and `jobs.RunTxSQL`, whose BEGIN and COMMIT database/sql sends on their own (two round trips more than RunTx); and through `jobs.RunTxBatch`, %d keys a call (one claim of them all with BEGIN, one INSERT of their rows, and their outcomes with COMMIT; its p50 and p99 are a call's, not a key's). Alternating slots of %s whose order rotates, %d rounds, with 4 and with 16 workers spread over the instances. *WAL per delivery* is what the whole server wrote while a way's slots ran (`pg_current_wal_insert_lsn()`), divided by its deliveries: full-page images included. What RunTx does beyond the inbox: each attempt's fencing token, the record's retention and its garbage collection, fingerprints, attempts counted towards a limit, waiting duplicates woken, and a transaction whose idle time is bounded.\n\n"+
			"River's row measures its unique insert, not its queue: the job it writes stays for a River worker, which would run it later and record its outcome (`JobCompleteTx` completes a job inside the worker's transaction, so a worker's effect and its job's completion commit together); a delivery that must do its effect before it returns, as here, has no River equivalent for that step, and nothing works the jobs in this benchmark. What the unique insert gives and RunTx does not: a job row for River's retries, scheduling, queues and UI. What RunTx gives and it does not: a duplicate that arrives while the first delivery's transaction is open is answered at once (in progress, or waits for the outcome with `Wait`), where River's unique insert waits on the uncommitted row's unique index entry until that transaction ends; a duplicate of a done key is a read, where River's is an update of the job's row (`ON CONFLICT … DO UPDATE`, so that the row is returned), a write; a failed attempt's error and count (MaxAttempts) recorded even though its transaction rolled back; a fencing token per attempt; a fingerprint that tells a different payload under the same key from a duplicate. (A River job stops being a duplicate's match when River's job cleaner, run by a started client's leader, deletes it after River's retention of finished jobs, as a RunTx record does after its window; here nothing completes or cleans the jobs.)", dedupInstances, dedupBatch, dedupSlot, dedupRounds),
		mdTable([]string{"way", "workers", "deliveries/s", "p50", "p99", "÷ raw", "÷ inbox", "WAL bytes per delivery", "WAL ÷ inbox"}, rows)+
			"\n\nThe cost of `RunTxSQL` (database/sql, pgx stdlib) beside `RunTx` (pgx), and beside a raw database/sql transaction, from the same slots (above 1 is slower):\n\n"+
			mdTable([]string{"workers", "p50: RunTxSQL ÷ RunTx", "time per delivery: RunTxSQL ÷ RunTx", "p50: RunTxSQL ÷ raw database/sql", "time per delivery: RunTxSQL ÷ raw database/sql"}, sqlRows)+
			"\n\nDeliveries per second of `RunTxBatch` beside `RunTx` and the inbox table, from the same slots:\n\n"+
			mdTable([]string{"workers", "keys a call", "RunTxBatch ÷ RunTx", "RunTxBatch ÷ inbox"}, batchRows))
}

// write writes benchmarks.md and its charts under dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "bench"), 0o755); err != nil {
		return err
	}
	if err := r.drawWaits(filepath.Join(dir, "bench", "handoff-waits.png")); err != nil {
		return err
	}
	if err := r.drawShares(filepath.Join(dir, "bench", "handoff-shares.png")); err != nil {
		return err
	}
	if len(r.leases) > 0 {
		if err := r.drawLeases(filepath.Join(dir, "bench", "lease-scale.png")); err != nil {
			return err
		}
	}
	var b strings.Builder
	m := r.machine
	fmt.Fprintf(&b, `# Benchmarks

<!-- Written by make bench (bench/): edit the program, not this page. -->

pglock measured side by side with raw SQL, the seed design it grew from, cirello.io/pglock,
bsm/redislock and go-redsync/redsync (beside pglock's own Redis Lockers), in one run: every scenario interleaves the designs (round by round, or in slots
whose order rotates), so the noise of a shared machine falls on every column alike. Read the ratios; the absolute figures belong to
this machine. Reproduce with:

    make bench    # regenerates this page and its charts (about %.0f minutes)

| | |
|---|---|
| measured | %s, commit %s |
| machine | %s, %d cores, %s |
| PostgreSQL | %s |
| Redis | %s |
| Go | %s |
| libraries | %s |

## The designs

`, r.elapsed.Minutes()+0.5, m.date, m.commit, m.cpu, m.cores, m.kernel, m.postgres, orNone(m.redis, "left out"), m.goVersion, m.libraries)
	for _, d := range r.designs {
		fmt.Fprintf(&b, "- **%s**: %s.\n", d.name, d.note)
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\n")
	for _, s := range r.sections {
		b.WriteString(s + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(b.String()), 0o644)
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

// drawWaits draws the distribution of handoff waits per design, on a log scale.
func (r *report) drawWaits(path string) error {
	p := plot.New()
	p.Title.Text = "4-way handoff: each acquisition's wait"
	p.X.Label.Text = "wait (ms, log scale)"
	p.Y.Label.Text = "fraction of acquisitions waiting at most this"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Left = false // bottom right, where every curve has reached 1
	for i, h := range r.handoffs {
		waits := slices.Clone(h.waits)
		slices.Sort(waits)
		if len(waits) == 0 {
			continue
		}
		step := max(1, len(waits)/400)
		var pts plotter.XYs
		for j := 0; j < len(waits); j += step {
			pts = append(pts, plotter.XY{X: max(float64(waits[j].Microseconds())/1e3, 0.01), Y: float64(j+1) / float64(len(waits))})
		}
		pts = append(pts, plotter.XY{X: max(float64(waits[len(waits)-1].Microseconds())/1e3, 0.01), Y: 1})
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		line.Dashes = plotutil.Dashes(i)
		p.Add(line)
		p.Legend.Add(h.design, line)
	}
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// drawShares draws each worker's share of the handoff acquisitions, per design.
func (r *report) drawShares(path string) error {
	p := plot.New()
	p.Title.Text = "4-way handoff: each worker's share (a fair share is 25 %)"
	p.Y.Label.Text = "share of acquisitions (%)"
	names := make([]string, len(r.handoffs))
	for i, h := range r.handoffs {
		names[i] = h.design
	}
	width := vg.Points(12)
	for w := range handoffWorkers {
		shares := make(plotter.Values, len(r.handoffs))
		for i, h := range r.handoffs {
			shares[i] = 100 * float64(h.perWorker[w]) / float64(max(h.acquisitions, 1))
		}
		bars, err := plotter.NewBarChart(shares, width)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(w)
		bars.LineStyle.Width = 0
		bars.Offset = width * (vg.Length(w) - vg.Length(handoffWorkers-1)/2) // the group centred on its name
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("worker %d", w+1), bars)
	}
	fair, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 25}, {X: float64(len(names)) - 0.5, Y: 25}})
	if err != nil {
		return err
	}
	fair.Color = color.Gray{Y: 100}
	fair.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(fair)
	p.Legend.Top = true
	p.NominalX(names...)
	return p.Save(10*vg.Inch, 4.5*vg.Inch, path)
}

func (r *report) leasesTable(idle idleResult) {
	none := r.leases[0]
	var rows [][]string
	for _, l := range r.leases[1:] {
		taken := fmt.Sprint(l.taken)
		if l.taken < l.leases {
			taken += fmt.Sprintf(" of %d (out of time)", l.leases)
		}
		rows = append(rows, []string{l.way, fmt.Sprint(l.leases), taken, l.acquireAll.Round(100 * time.Millisecond).String(), fmt.Sprint(l.refused),
			fmt.Sprint(l.lost), perSecond(l.txPerSec), fmt.Sprintf("%.2f", l.dbCPU), ms(l.tryP50), fmt.Sprint(l.probesRefused),
			ratio(float64(l.tryP50), float64(none.tryP50))})
	}
	r.add("Tens of thousands of leases in one process",
		fmt.Sprintf("One process takes n table leases (TTL %s, renewed every third of it), %d at a time on a pool of %d, and holds them for %s: v0.1's way, where every lease renews itself with a statement of its own (`extend_lock_ms`), beside pglock's, where a Locker renews every lease due in one statement per tick (`pglock_renew_many`, at most %d leases a statement). *Transactions/s* and *PostgreSQL cores* are the database's while holding, over the first half of the hold (every statement is a transaction); *try p50* is a `TryAcquire`+`Release` on a free name in the second half, beside the same with no lease held (%s). A lease lost is one whose holder was told so. *Refused: saturated* counts the acquisitions refused with `pglock.ErrSaturated` because the renewals of the leases already held were more than half a heartbeat behind (each tried again 50 ms later), while taking the leases and among the tries.",
			*leaseTTL, leaseAcquirers, leaseConns, *leaseHold, 5000, ms(none.tryP50)),
		mdTable([]string{"way", "leases", "taken", "time to take them", "refused: saturated", "lost", "transactions/s", "PostgreSQL cores", "try p50", "tries refused: saturated", "try ÷ none held"}, rows)+
			"\n![transactions per second and try latency against leases held](bench/lease-scale.png)\n")
	r.add("Holding and waiting, idle",
		fmt.Sprintf("One process holds %d table leases (TTL 10 s) and another waits for each of them (`Acquire`, listening for releases and handoffs); nothing changes hands. What that costs the database, over %s (v0.1 measured 7,114 transactions/s in the same setup: a statement per lease per heartbeat, and each waiter polling about once a second).", idleHeld, idle.window),
		mdTable([]string{"leases held", "waiters", "transactions/s", "PostgreSQL cores"},
			[][]string{{fmt.Sprint(idleHeld), fmt.Sprint(idleHeld), perSecond(idle.txPerSec), fmt.Sprintf("%.2f", idle.dbCPU)}}))
}

// drawLeases draws, per way, the database's transactions per second and the try's p50 against
// the leases held, both on log scales.
func (r *report) drawLeases(path string) error {
	panel := func(title, ylabel string, value func(leaseResult) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "leases held (log scale)"
		p.Y.Label.Text = ylabel
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		var ways []string
		for _, l := range r.leases[1:] {
			if !slices.Contains(ways, l.way) {
				ways = append(ways, l.way)
			}
		}
		for i, way := range ways {
			var pts plotter.XYs
			for _, l := range r.leases[1:] {
				if l.way == way {
					pts = append(pts, plotter.XY{X: float64(l.leases), Y: max(value(l), 0.01)})
				}
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i)
			p.Add(line, points)
			p.Legend.Add(way, line, points)
		}
		p.Add(plotter.NewGrid())
		return p, nil
	}
	tx, err := panel("What holding costs the database", "transactions/s (log scale)", func(l leaseResult) float64 { return l.txPerSec })
	if err != nil {
		return err
	}
	try, err := panel("TryAcquire+Release while holding", "p50 (ms, log scale)", func(l leaseResult) float64 { return float64(l.tryP50.Microseconds()) / 1e3 })
	if err != nil {
		return err
	}
	img := vgimg.New(12*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 4}
	tx.Draw(tiles.At(dc, 0, 0))
	try.Draw(tiles.At(dc, 1, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
