package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/ops"
)

// parsePages parses each page with the layout it shares.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }, "when": when, "ago": ago, "duration": span, "json": func(b []byte) string { return string(b) },
		"last": func(n int) int { return n - 1 },
		// newSchedule is what the form of a new runtime schedule starts from: the defaults.
		"newSchedule": func() cron.ScheduleInfo {
			return cron.ScheduleInfo{TimeZone: "UTC", Overlap: cron.DefaultOverlap, CatchUp: cron.DefaultCatchUp}
		},
		"overlaps": func() []string { return []string{"skip", "buffer_one", "allow", "replace"} },
		"catchUps": func() []string { return []string{"skip", "latest", "all"} },
		"formtime": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02T15:04:05")
		}, "inc": func(n int) int { return n + 1 }, "offset": offset,
		"ms": func(ms int64) string { return span(time.Duration(ms) * time.Millisecond) }}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/parts/*.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		base := path.Base(name)
		if base == "layout.html" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(files, name)
		if err != nil {
			return nil, err
		}
		pages[strings.TrimSuffix(base, ".html")] = t
	}
	return pages, nil
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string        // the section, for the navigation
	Base     string        // the prefix the console is mounted under, with a trailing slash
	Refresh  time.Duration // 0: the page does not refresh
	ReadOnly bool
	Done     string    // what the last action did
	Now      time.Time // by the database's clock
	Data     any
}

// base is the path the console is mounted under: what a StripPrefix took off the request's
// path, so that links and forms stay under it.
func base(r *http.Request) string {
	full := r.URL.EscapedPath()
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		full = u.EscapedPath()
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(full, r.URL.EscapedPath()), "/")
	if !strings.HasPrefix(prefix, "/") || strings.HasPrefix(prefix, "//") {
		return "/" // not a path of this host's (a router that did not clean it): the root
	}
	return prefix + "/"
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Base, p.ReadOnly = base(r), c.opts.ReadOnly(r)
	if status == http.StatusOK {
		p.Done = takeDone(w, r)
		if p.Refresh == 0 && c.refresh > 0 && name != "confirm" {
			p.Refresh = c.refresh
		}
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.opts.Logger.Error("pglock console: render", "page", name, "error", err)
		http.Error(w, "pglock console: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail answers with an error page: 404 for what does not exist, 400 for a malformed request,
// 403 for a refused action, 500 (logged, with the database error kept out of the page) else.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	msg := inConsoleWords(err)
	switch {
	case errors.Is(err, pglock.ErrNotMigrated):
		c.opts.Logger.Error("pglock console", "path", r.URL.Path, "error", err)
		msg = "pglock's tables and functions are not in this database, or not all of them: run `pglockctl migrate up` (docs/sql.md)"
	case status >= 500:
		c.opts.Logger.Error("pglock console", "path", r.URL.Path, "error", err)
		msg = "the database could not be read; the console's log says why"
	}
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Data: msg})
}

// inConsoleWords is err's text with the server's error, if it holds one, told by its message
// alone: "ERROR: …" and the SQLSTATE are for the log.
func inConsoleWords(err error) string {
	msg := err.Error()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg = strings.Replace(msg, pgErr.Error(), pgErr.Message, 1)
	}
	return msg
}

// overviewData is the overview's: counts, and what needs attention.
type overviewData struct {
	ops.LockCounts
	ops.Counts
	AdvisoryLocks, AdvisoryWaiting int
	Schedules, Paused, Orphaned    int
	Elections, Leaderless          int
	Instances                      []ops.Instance // live schedulers, with their clocks
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	counts, err := ops.CountLocks(ctx, c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	locks, err := ops.ListLocks(ctx, c.pool, ops.LockFilter{Kind: ops.KindAdvisory})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	schedules, err := ops.Schedules(ctx, c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	leaders, err := ops.Leaders(ctx, c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	instances, err := ops.Instances(ctx, c.pool, counts.Now)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	others, err := ops.Count(ctx, c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	d := overviewData{LockCounts: counts, Counts: others, Instances: instances}
	for _, l := range locks.AdvisoryLocks {
		if l.Granted {
			d.AdvisoryLocks++
		} else {
			d.AdvisoryWaiting++
		}
	}
	for _, s := range schedules {
		d.Schedules++
		if s.Paused {
			d.Paused++
		}
		if s.Orphaned {
			d.Orphaned++
		}
	}
	for _, l := range leaders {
		d.Elections++
		if l.Holder == "" || !l.ExpiresAt.After(counts.Now) {
			d.Leaderless++
		}
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Now: counts.Now, Data: d})
}

func (c *console) locks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 100)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	kind := ops.KindAll
	if q.Get("after") != "" {
		kind = ops.KindTable // the next page of table locks
	}
	locks, err := ops.ListLocks(r.Context(), c.pool, ops.LockFilter{Kind: kind, Contains: q.Get("name"), After: q.Get("after"), Limit: limit})
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "locks", page{Title: "Locks", Nav: "locks", Now: locks.Now,
		Data: struct {
			ops.Locks
			Name string
		}{locks, q.Get("name")}})
}

func (c *console) lock(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := pglock.ValidateName(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	locks, waiters, err := ops.Lock(r.Context(), c.pool, name)
	// A lock's name exists only while it is held or waited for: a free one is a page that says
	// so, not a 404, so that a page left open follows its lock's release at the next refresh.
	if errors.Is(err, pglock.ErrNotFound) {
		locks.Now, err = ops.DatabaseNow(r.Context(), c.pool)
	}
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	data := struct {
		Name      string
		Held      []ops.TableLock
		Waiters   []ops.Waiter
		Semaphore bool
		Shares    []ops.KeyShare
	}{Name: name, Held: locks.TableLocks, Waiters: waiters, Semaphore: ops.IsSemaphore(name)}
	if data.Semaphore && !ops.IsSemaphorePlace(name) { // a place's page shows that place only
		data.Shares = ops.Shares(locks.TableLocks, waiters)
	}
	c.render(w, r, http.StatusOK, "lock", page{Title: "Lock " + name, Nav: "locks", Now: locks.Now, Data: data})
}

func (c *console) schedules(w http.ResponseWriter, r *http.Request) {
	renderList(c, w, r, "cron", "Cron", ops.Schedules)
}

// renderList renders the page name of a list read, with the database's time.
func renderList[T any](c *console, w http.ResponseWriter, r *http.Request, name, title string,
	read func(context.Context, *pgxpool.Pool) ([]T, error)) {
	list, err := read(r.Context(), c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	now, err := ops.DatabaseNow(r.Context(), c.pool)
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	c.render(w, r, http.StatusOK, name, page{Title: title, Nav: name, Now: now, Data: list})
}

func (c *console) schedule(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if err := pglock.ValidateName(name); err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	limit, err := limitParam(r, 100)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	var before *cron.RunRecord
	if q := r.URL.Query(); q.Has("before") {
		t, err1 := time.Parse(time.RFC3339Nano, q.Get("before"))
		id, err2 := strconv.ParseInt(q.Get("before_id"), 10, 64)
		if err1 != nil || err2 != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: before must be a run's tick (RFC 3339) and before_id its id", pglock.ErrInvalidArgument))
			return
		}
		before = &cron.RunRecord{ScheduledTime: t, ID: id}
	}
	info, runs, more, now, err := ops.Schedule(r.Context(), c.pool, name, before, limit)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "schedule", page{Title: "Schedule " + name, Nav: "cron", Now: now,
		Data: struct {
			Info cron.ScheduleInfo
			Runs []cron.RunRecord
			More bool
		}{info, runs, more}})
}

func (c *console) leaders(w http.ResponseWriter, r *http.Request) {
	renderList(c, w, r, "leaders", "Leaders", ops.Leaders)
}

func (c *console) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := ops.JobFilter{Scope: q.Get("scope"), AnyScope: q.Get("scope") == "", Status: q.Get("status"), KeyGlob: q.Get("key"),
		AfterScope: q.Get("after_scope"), AfterKey: q.Get("after_key"), HasAfter: q.Has("after_key")}
	limit, err := limitParam(r, 100)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f.Limit = limit
	list, err := ops.ListJobs(r.Context(), c.pool, f)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	debounced, err := ops.ListDebounced(r.Context(), c.pool, f.Scope, f.AnyScope, limit)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "jobs", page{Title: "Jobs", Nav: "jobs", Now: list.Now,
		Data: struct {
			ops.Jobs
			Filter    ops.JobFilter
			Debounced []ops.Debounced
		}{list, f, debounced}})
}

func (c *console) job(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rec, now, err := ops.GetJob(r.Context(), c.pool, q.Get("scope"), q.Get("key"))
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "job", page{Title: "Job " + rec.Key, Nav: "jobs", Now: now, Data: rec})
}

func (c *console) rateLimits(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 100)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f := ops.RateFilter{Contains: q.Get("key"), AfterKey: q.Get("after_key"), HasAfter: q.Has("after_key"),
		AfterDurable: q.Get("after_durable") == "true", Limit: limit}
	keys, err := ops.ListRateLimits(r.Context(), c.pool, f)
	if err != nil {
		c.failWith(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "ratelimits", page{Title: "Rate limits", Nav: "ratelimits", Now: keys.Now,
		Data: struct {
			ops.RateKeys
			Key string
		}{keys, q.Get("key")}})
}

// limitParam reads the limit query parameter: 1 to 1000, def when absent.
func limitParam(r *http.Request, def int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1000 {
		return 0, fmt.Errorf("%w: limit %q must be a number from 1 to 1000", pglock.ErrInvalidArgument, s)
	}
	return n, nil
}

// when shows a database time absolutely (UTC, to the second).
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago shows t relative to now: "5s ago", "in 2m".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now)
	if d < 0 {
		return span(-d) + " ago"
	}
	return "in " + span(d)
}

// offset shows a clock offset with its sign: the database's clock minus the host's.
func offset(d time.Duration) string {
	if d < 0 {
		return "−" + span(-d)
	}
	return "+" + span(d)
}

// span shows a duration to a useful precision.
func span(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
