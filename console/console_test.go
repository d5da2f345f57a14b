package console_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/console"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/consoletest"
	"github.com/pglock/pglock/internal/ops"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// requireHeld fails unless the seeded lock is still held, in the database, by its holder.
func requireHeld(t *testing.T, s consoletest.Seeded) {
	t.Helper()
	var token int64
	require.NoError(t, s.DB.Pool.QueryRow(context.Background(), "SELECT fencing_token FROM distributed_locks WHERE lock_name = 'orders:42'").Scan(&token))
	require.Equal(t, s.Lock.Token(), token, "nothing was written")
}

// mount serves the console under /ops/, as a host application would.
func mount(t *testing.T, pool *pgxpool.Pool, opts *console.Options) *httptest.Server {
	t.Helper()
	h, err := console.New(pool, opts)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// noKeepAlive is the tests' client: no connection outlives its request (goleak).
var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := noKeepAlive.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, string(body)}
}

func get(t *testing.T, srv *httptest.Server, path string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	return do(t, req)
}

// page is what a test reads of an HTML page: its links, sources and form actions, and its text.
type page struct {
	urls []string
	text string
}

// parse reads an HTML page with encoding/xml in its lenient HTML mode.
func parse(t *testing.T, body string) page {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(body))
	dec.Strict, dec.AutoClose, dec.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	var p page
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch tok := tok.(type) {
		case xml.StartElement:
			for _, a := range tok.Attr {
				if a.Name.Local == "href" || a.Name.Local == "src" || a.Name.Local == "action" {
					p.urls = append(p.urls, a.Value)
				}
			}
		case xml.CharData:
			text.Write(tok)
			text.WriteByte(' ')
		}
	}
	p.text = strings.Join(strings.Fields(text.String()), " ")
	return p
}

// Every page shows what the database holds, and every link, source and form stays under the
// prefix the console is mounted at.
func TestEveryPageShowsItsRowsAndStaysUnderItsPrefix(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	srv := mount(t, s.DB.Pool, nil)
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/ops/", []string{"4 table locks", "1 waiting for table locks", "1 advisory locks", "1 schedules", "1 elections", "orders:42", "Instances' clocks", "console-test@",
			"job records (the planner's estimate)"}},
		{"/ops/locks", []string{"orders:42", "console-test@", `{"owner": "billing"}`, "pglock.leader/reconciler", "nightly-report", "exclusive", "granted"}},
		{"/ops/locks?name=orders", []string{"orders:42"}},
		{"/ops/lock?name=pglock.semaphore/exports", []string{"Places by key", "tenant-a", "tenant-b", "Places held"}},
		{"/ops/jobs", []string{"invoice:1", "succeeded", "invoice:2", "failed", "card declined <script>",
			"sync:user-7", "was superseded by attempt", "Debounced", "digest:team-3", `{"events": 2}`}},
		{"/ops/jobs?scope=billing&status=failed&key=invoice:*", []string{"invoice:2"}},
		{"/ops/job?scope=billing&key=invoice:2", []string{"invoice:2", "failed", "card declined <script>", "Attempts 1"}},
		{"/ops/cron", []string{"rollup", "@every 1s", "UTC", "skip", "active", "failed"}},
		{"/ops/schedule?name=rollup", []string{"rollup failed: disk full", "scheduled", "console-test@"}},
		{"/ops/leaders", []string{"reconciler", "console-test@"}},
		{"/ops/ratelimits", []string{"partner-api:tenant-1", "logged", "Fully free at"}},
		{"/ops/ratelimits?key=tenant", []string{"partner-api:tenant-1"}},
	} {
		t.Run(c.path, func(t *testing.T) {
			r := get(t, srv, c.path)
			require.Equal(t, http.StatusOK, r.status, r.body)
			p := parse(t, r.body)
			for _, want := range c.want {
				require.Contains(t, p.text, want)
			}
			require.NotEmpty(t, p.urls)
			for _, u := range p.urls {
				require.True(t, strings.HasPrefix(u, "/ops/"), "%s leaves the prefix", u)
			}
			require.Contains(t, r.header.Get("Content-Security-Policy"), "script-src 'self'")
			require.NotContains(t, r.header.Get("Content-Security-Policy"), "unsafe-inline")
			require.Equal(t, "DENY", r.header.Get("X-Frame-Options"))
			require.NotContains(t, r.body, "card declined <script>", "text is escaped")
		})
	}
	require.NotContains(t, parse(t, get(t, srv, "/ops/locks?name=nothing-like-it").body).text, "orders:42")
	require.NotContains(t, parse(t, get(t, srv, "/ops/jobs?status=succeeded").body).text, "invoice:2")
	require.Regexp(t, `digest:team-3 1 .* in (1h0m0s|59m[0-9]+s)`, parse(t, get(t, srv, "/ops/jobs").body).text,
		"a pending debounced key with its deliveries and its due time")
}

// The static files are served, and a page works mounted at the root too.
func TestStaticFilesAndTheRootMount(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	h, err := console.New(d.Pool, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/static/console.css", "/static/console.js"} {
		r := get(t, srv, path)
		require.Equal(t, http.StatusOK, r.status, path)
		require.NotEmpty(t, r.body)
	}
	for _, u := range parse(t, get(t, srv, "/").body).urls {
		require.True(t, strings.HasPrefix(u, "/"), u)
		require.False(t, strings.HasPrefix(u, "//"), u)
	}
}

// Unknown names are 404 pages, malformed filters 400 with the reason.
func TestBadRequestsSayWhy(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	srv := mount(t, d.Pool, nil)
	for _, c := range []struct {
		path   string
		status int
		reason string
	}{
		{"/ops/nowhere", http.StatusNotFound, "no such page"},
		{"/ops/schedule?name=missing", http.StatusNotFound, `no schedule "missing"`},
		{"/ops/schedule?name=", http.StatusBadRequest, "invalid lock name"},
		{"/ops/job?scope=&key=missing", http.StatusNotFound, "no record of job"},
		{"/ops/job?scope=&key=", http.StatusBadRequest, "job key"},
		{"/ops/jobs?status=finished", http.StatusBadRequest, "status must be running, succeeded or failed"},
		{"/ops/jobs?limit=0", http.StatusBadRequest, "limit"},
		{"/ops/jobs?limit=many", http.StatusBadRequest, "limit"},
		{"/ops/locks?name=%00", http.StatusBadRequest, "NUL"},
	} {
		r := get(t, srv, c.path)
		require.Equal(t, c.status, r.status, c.path)
		require.Contains(t, parse(t, r.body).text, c.reason, c.path)
	}
}

// A read-only console refuses every POST on the server (403), whatever a page showed; a
// console that allows actions still refuses cross-origin POSTs.
func TestReadOnlyAndCrossOriginPostsAreRefused(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	readOnly := mount(t, s.DB.Pool, nil)
	post := func(srv *httptest.Server, path string, header map[string]string) response {
		form := url.Values{"name": {"orders:42"}, "token": {fmt.Sprint(s.Lock.Token())}}
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return do(t, req)
	}
	r := post(readOnly, "/ops/do/release", map[string]string{})
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, r.body, "read-only")
	requireHeld(t, s)
	require.Contains(t, parse(t, get(t, readOnly, "/ops/locks").body).text, "orders:42")

	acting := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false }})
	r = post(acting, "/ops/do/release", map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, r.status)
	require.NotContains(t, r.body, "read-only", "refused as cross-origin")
	r = post(acting, "/ops/do/release", map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, r.status)
	requireHeld(t, s)
	require.Contains(t, parse(t, get(t, acting, "/ops/").body).text, "actions allowed")
}

// A Host header the console does not serve is refused: a page elsewhere cannot reach it by
// rebinding its DNS name to 127.0.0.1. One rule reads the Host header and AllowedHosts: IPv4,
// IPv6 with and without brackets, with and without a port (an entry with one allows that port
// only), names in any case.
func TestForeignHostsAreRefused(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	for _, c := range []struct {
		allowed []string
		host    string
		status  int
	}{
		{nil, "localhost:8080", http.StatusOK},
		{nil, "127.0.0.1", http.StatusOK},
		{nil, "[::1]:8080", http.StatusOK},
		{nil, "evil.example", http.StatusMisdirectedRequest},
		{nil, "evil.example:8080", http.StatusMisdirectedRequest},
		{[]string{"ops.internal"}, "ops.internal:8443", http.StatusOK},
		{[]string{"ops.internal"}, "localhost", http.StatusMisdirectedRequest},
		{nil, "LOCALHOST:8080", http.StatusOK},
		{nil, "[::1]", http.StatusOK},
		{nil, "127.0.0.2", http.StatusMisdirectedRequest},
		{[]string{"Ops.Internal"}, "OPS.internal", http.StatusOK},
		{[]string{"[::1]"}, "[::1]:8080", http.StatusOK},
		{[]string{"[::1]"}, "[::1]", http.StatusOK},
		{[]string{"::1"}, "[::1]", http.StatusOK},
		{[]string{"::1"}, "[::1]:8080", http.StatusOK},
		{[]string{"[::1]:8080"}, "[::1]:8080", http.StatusOK},
		{[]string{"[::1]:8080"}, "[::1]:9090", http.StatusMisdirectedRequest},
		{[]string{"[::1]:8080"}, "[::1]", http.StatusMisdirectedRequest},
		{[]string{"10.0.0.5"}, "10.0.0.5:8080", http.StatusOK},
		{[]string{"10.0.0.5:8080"}, "10.0.0.5:8081", http.StatusMisdirectedRequest},
		{[]string{"[fd00::5]"}, "[FD00::5]:8443", http.StatusOK},
		{[]string{"[fd00::5]"}, "[fd00::6]:8443", http.StatusMisdirectedRequest},
	} {
		srv := mount(t, d.Pool, &console.Options{AllowedHosts: c.allowed})
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/ops/", nil)
		require.NoError(t, err)
		req.Host = c.host
		require.Equal(t, c.status, do(t, req).status, "%v %s", c.allowed, c.host)
	}
	for _, bad := range []string{"a b", "ops.internal:https", "[::1]:80x"} {
		_, err := console.New(d.Pool, &console.Options{AllowedHosts: []string{bad}})
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, bad)
	}
	_, err := console.New(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
}

// A lock released elsewhere is gone from the page at its next refresh, which is a plain GET of
// the same page.
func TestAReleasedLockLeavesThePage(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	srv := mount(t, s.DB.Pool, &console.Options{RefreshInterval: time.Second})
	r := get(t, srv, "/ops/locks")
	require.Contains(t, r.body, `data-refresh-ms="1000"`)
	require.Contains(t, parse(t, r.body).text, "orders:42")
	require.NoError(t, s.Lock.Release(testdb.Context(t)))
	require.NotContains(t, parse(t, get(t, srv, "/ops/locks").body).text, "orders:42")
}

// Job records page by key (keyset pagination): every record once, in order.
func TestJobsPageByKey(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	dd, err := jobs.New(d.Pool, nil)
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		_, err := dd.RunTx(ctx, key, nil, func(context.Context, pgx.Tx) error { return nil })
		require.NoError(t, err)
	}
	srv := mount(t, d.Pool, nil)
	var seen []string
	next := "/ops/jobs?limit=2"
	for next != "" {
		r := get(t, srv, next)
		require.Equal(t, http.StatusOK, r.status, r.body)
		next = ""
		for _, u := range parse(t, r.body).urls {
			if strings.HasPrefix(u, "/ops/job?") {
				q, err := url.ParseQuery(strings.TrimPrefix(u, "/ops/job?"))
				require.NoError(t, err)
				seen = append(seen, q.Get("key"))
			}
			if strings.Contains(u, "after_key=") {
				next = u + "&limit=2"
			}
		}
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, seen)
}

// client is a browser-like client: cookies kept, redirects followed.
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, Transport: noKeepAlive.Transport}
}

// act confirms and performs an action as a user would: the confirmation page's form, posted.
func act(t *testing.T, c *http.Client, srv *httptest.Server, confirmPath string, extra url.Values) response {
	t.Helper()
	return actVia(t, c, srv, confirmPath, nil, extra)
}

// actVia is act for an action whose confirmation page a form asks for (POST confirmForm),
// when confirmForm is not nil.
func actVia(t *testing.T, c *http.Client, srv *httptest.Server, confirmPath string, confirmForm, extra url.Values) response {
	t.Helper()
	var resp *http.Response
	var err error
	if confirmForm != nil {
		resp, err = c.PostForm(srv.URL+confirmPath, confirmForm)
	} else {
		resp, err = c.Get(srv.URL + confirmPath)
	}
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	action, form := formOf(t, string(body))
	for k, v := range extra {
		form[k] = v
	}
	require.True(t, strings.HasPrefix(action, "/ops/do/"), action)
	resp, err = c.PostForm(srv.URL+action, form)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, string(body)}
}

// formOf reads the POST form of a page: its action and hidden fields.
func formOf(t *testing.T, body string) (string, url.Values) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(body))
	dec.Strict, dec.AutoClose, dec.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	action, values := "", url.Values{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if el, ok := tok.(xml.StartElement); ok {
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch {
			case el.Name.Local == "form" && attr["method"] == "post":
				action = attr["action"]
			case el.Name.Local == "input" && attr["type"] == "hidden":
				values.Set(attr["name"], attr["value"])
			}
		}
	}
	require.NotEmpty(t, action, "a form to post")
	return action, values
}

// Each action asks for confirmation, does what pglockctl's command does, is logged with who did
// it, records it where the database keeps it, and shows what it did on the page it returns to.
func TestActionsConfirmActLogAndReport(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	ctx := testdb.Context(t)
	var logs strings.Builder
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	srv := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false },
		Operator: func(*http.Request) string { return "alice" }, Logger: logger})
	c := client(t)

	r := act(t, c, srv, fmt.Sprintf("/ops/confirm/release?name=orders:42&token=%d", s.Lock.Token()), nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, `Released "orders:42"`)
	require.NotContains(t, parse(t, get(t, srv, "/ops/locks").body).text, "orders:42")
	again := fmt.Sprintf("/ops/confirm/release?name=orders:42&token=%d", s.Lock.Token())
	require.Equal(t, http.StatusNotFound, get(t, srv, again).status, "released already: no lock to confirm")
	resp, err := c.PostForm(srv.URL+"/ops/do/release", url.Values{"name": {"orders:42"}, "token": {fmt.Sprint(s.Lock.Token())}})
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a POST past the confirmation too")
	require.Contains(t, string(body), "nobody holds table lock")

	// Pause needs a note; it is recorded with who paused.
	r = act(t, c, srv, "/ops/confirm/pause?name=rollup", nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.body, "note")
	list, err := cron.List(ctx, s.DB.Pool)
	require.NoError(t, err)
	require.False(t, list[0].Paused, "nothing written on a refusal")
	r = act(t, c, srv, "/ops/confirm/pause?name=rollup", url.Values{"note": {"disk full, see INC-7"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "disk full, see INC-7 by alice")
	r = act(t, c, srv, "/ops/confirm/resume?name=rollup", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "Resumed")

	// A trigger is queued with who asked for it.
	r = act(t, c, srv, "/ops/confirm/trigger?name=rollup", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "manual by alice")

	// A backfill previews how many ticks it will queue, then queues as many.
	runs, err := cron.History(ctx, s.DB.Pool, "rollup", 1000)
	require.NoError(t, err)
	first := runs[len(runs)-1].ScheduledTime.UTC()
	backfill := url.Values{"name": {"rollup"}, "from": {first.Add(-10 * time.Second).Format("2006-01-02T15:04:05")},
		"to": {first.Add(-2 * time.Second).Format(time.RFC3339)}}
	resp, err = c.PostForm(srv.URL+"/ops/confirm/backfill", backfill)
	require.NoError(t, err)
	preview, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(preview))
	require.Contains(t, parse(t, string(preview)).text, "As of now, it will queue 9 ticks.")
	history, err := cron.History(ctx, s.DB.Pool, "rollup", 1000)
	require.NoError(t, err)
	require.Len(t, history, len(runs), "the preview queued nothing")
	r = actVia(t, c, srv, "/ops/confirm/backfill", backfill, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, `Queued 9 ticks of "rollup".`)
	require.Equal(t, http.StatusMethodNotAllowed, get(t, srv, "/ops/confirm/backfill?name=rollup&from=2026-01-01T00:00&to=2026-01-02T00:00").status,
		"a preview is never a link")
	for _, bad := range []struct {
		form   url.Values
		status int
	}{
		{url.Values{"name": {"rollup"}, "from": {"yesterday"}, "to": {"today"}}, http.StatusBadRequest},
		{url.Values{"name": {"nope"}, "from": {"2026-01-01T00:00"}, "to": {"2026-01-02T00:00"}}, http.StatusNotFound},
	} {
		resp, err := c.PostForm(srv.URL+"/ops/confirm/backfill", bad.form)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, bad.status, resp.StatusCode, "%v", bad.form)
	}

	// A leader's resignation names the term it was asked for.
	current, err := leader.Current(ctx, s.DB.Pool, "reconciler")
	require.NoError(t, err)
	r = act(t, c, srv, fmt.Sprintf("/ops/confirm/resign?election=reconciler&term=%d", current.Term+1), nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Contains(t, r.body, "changed hands meanwhile")
	r = act(t, c, srv, fmt.Sprintf("/ops/confirm/resign?election=reconciler&term=%d", current.Term), nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "was made to resign")

	r = act(t, c, srv, "/ops/confirm/forget?scope=billing&key=invoice:2", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, http.StatusNotFound, get(t, srv, "/ops/job?scope=billing&key=invoice:2").status)

	held, err := ops.AdvisoryHolders(ctx, s.DB.Pool, advisory.StringKey("nightly-report"))
	require.NoError(t, err)
	require.Len(t, held, 1)
	key, _ := held[0].Key.Int64()
	r = act(t, c, srv, fmt.Sprintf("/ops/confirm/terminate?pid=%d&key=%d", held[0].PID, key), nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "Ended backend")

	pairSession, err := advisory.Open(ctx, s.DB.NewPool(t, nil), nil)
	require.NoError(t, err)
	t.Cleanup(func() { pairSession.Close(context.Background()) })
	require.NoError(t, pairSession.Lock(ctx, advisory.PairKey(7, 9)))
	r = act(t, c, srv, fmt.Sprintf("/ops/confirm/terminate?pid=%d&key=7,9", pairSession.PID()), nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	testdb.Receive(t, pairSession.Lost())

	r = act(t, c, srv, "/ops/confirm/gc", nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "Deleted")

	logMu.Lock()
	defer logMu.Unlock()
	for _, action := range []string{"release", "pause", "resume", "trigger", "backfill", "resign", "forget", "terminate", "gc"} {
		require.Contains(t, logs.String(), "action="+action+" by=alice")
	}
}

// A refusal says what was wrong in the console's words, never PostgreSQL's raw text; the
// confirmation page of a target that does not exist is a 404 at once; and a database without
// pglock's schema says, on every page, how to install it.
func TestRefusalsSayWhatWasWrongInTheConsolesWords(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	srv := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false }})
	for _, tc := range []struct {
		path   string
		status int
		says   string
	}{
		{"/ops/confirm/pause?name=no-such", http.StatusNotFound, `no-such`},
		{"/ops/confirm/trigger?name=no-such", http.StatusNotFound, `no-such`},
		{"/ops/confirm/release?name=nobody&token=1", http.StatusNotFound, `nobody holds`},
		{"/ops/confirm/resign?election=no-such&term=1", http.StatusNotFound, `election "no-such" has no leader`},
		{"/ops/confirm/forget?scope=billing&key=no-such", http.StatusNotFound, `no-such`},
		{"/ops/confirm/terminate?pid=1&key=5", http.StatusNotFound, `does not hold advisory lock 5`},
		{"/ops/schedule?name=a%00b", http.StatusBadRequest, `holds a NUL byte or bytes that are not UTF-8`},
		{"/ops/confirm/pause?name=%ff", http.StatusBadRequest, `holds a NUL byte or bytes that are not UTF-8`},
	} {
		r := get(t, srv, tc.path)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.path, r.body)
		text := parse(t, r.body).text
		require.Contains(t, text, tc.says, tc.path)
		require.NotContains(t, text, "SQLSTATE", tc.path)
		require.NotContains(t, text, "ERROR:", tc.path)
	}
	form := url.Values{"name": {"no-such"}, "note": {"why"}}
	resp, err := noKeepAlive.PostForm(srv.URL+"/ops/do/pause", form)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "a POST past the confirmation")
	require.NotContains(t, string(body), "SQLSTATE")

	bare := testdb.New(t, &testdb.Options{Unmigrated: true})
	r := get(t, mount(t, bare.Pool, nil), "/ops/locks")
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.Contains(t, parse(t, r.body).text, "pglockctl migrate up")
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A read-only console offers no action and refuses every one, confirmation pages included;
// unknown actions are 404.
func TestReadOnlyOffersAndTakesNoAction(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	readOnly := mount(t, s.DB.Pool, nil)
	for _, path := range []string{"/ops/", "/ops/locks", "/ops/leaders", "/ops/schedule?name=rollup", "/ops/job?scope=billing&key=invoice:1"} {
		for _, u := range parse(t, get(t, readOnly, path).body).urls {
			require.NotContains(t, u, "/confirm/", path)
		}
	}
	require.Equal(t, http.StatusForbidden, get(t, readOnly, "/ops/confirm/gc").status)
	resp, err := noKeepAlive.PostForm(readOnly.URL+"/ops/do/release", url.Values{"name": {"orders:42"}, "token": {fmt.Sprint(s.Lock.Token())}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	requireHeld(t, s)

	acting := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false }})
	require.Equal(t, http.StatusNotFound, get(t, acting, "/ops/confirm/drop-table").status)
	require.Equal(t, http.StatusBadRequest, get(t, acting, "/ops/confirm/release?name=orders:42").status, "no token")
	var offered []url.Values
	for _, u := range parse(t, get(t, acting, "/ops/locks").body).urls {
		if target, ok := strings.CutPrefix(u, "/ops/confirm/release?"); ok {
			q, err := url.ParseQuery(target)
			require.NoError(t, err)
			offered = append(offered, q)
		}
	}
	require.Contains(t, offered, url.Values{"name": {"orders:42"}, "token": {fmt.Sprint(s.Lock.Token())}})
}

// A lock's page shows its holder and its waiters in queue order; a lock nobody holds or waits
// for is a page that says so (a name exists only while in use: not a 404).
func TestALockShowsItsWaitersInQueueOrder(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	ctx := testdb.Context(t)
	acquired := make(chan error, 2)
	for i, app := range []string{"first-waiter", "second-waiter"} {
		l, err := tablelock.New(s.DB.NewPool(t, nil), &tablelock.Config{AppName: app})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close(context.Background()) })
		go func() {
			_, err := l.Acquire(ctx, "orders:42", nil)
			acquired <- err
		}()
		testdb.WaitFor(t, func() bool {
			var places int
			require.NoError(t, s.DB.Pool.QueryRow(ctx, "SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'orders:42'").Scan(&places))
			return places == i+1
		}, "%s queued", app)
	}
	srv := mount(t, s.DB.Pool, nil)
	r := get(t, srv, "/ops/lock?name=orders:42")
	require.Equal(t, http.StatusOK, r.status, r.body)
	text := parse(t, r.body).text
	first, second := strings.Index(text, "first-waiter@"), strings.Index(text, "second-waiter@")
	require.True(t, first >= 0 && second > first, "in queue order: %s", text)
	require.Contains(t, text, "console-test@", "the holder")
	r = get(t, srv, "/ops/lock?name=nobody")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, parse(t, r.body).text, "Nobody holds it.")
	require.Contains(t, parse(t, r.body).text, "Nobody waits.")
	require.Equal(t, http.StatusBadRequest, get(t, srv, "/ops/lock?name=").status)
	require.NoError(t, s.Lock.Release(ctx))
	require.NoError(t, testdb.Receive(t, acquired))
}

// A force-release names the holding the page showed: a lock that changed hands since is left to
// its new holder (the check and the release are one transaction).
func TestAReleaseOfALockThatChangedHandsDoesNothing(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	ctx := testdb.Context(t)
	srv := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false }})
	c := client(t)
	resp, err := c.Get(srv.URL + fmt.Sprintf("/ops/confirm/release?name=orders:42&token=%d", s.Lock.Token()))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	action, form := formOf(t, string(body))

	require.NoError(t, s.Lock.Release(ctx)) // meanwhile, the lock changes hands
	l, err := tablelock.New(s.DB.NewPool(t, nil), &tablelock.Config{AppName: "new-holder"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close(context.Background()) })
	newHolder, err := l.TryAcquire(ctx, "orders:42", nil)
	require.NoError(t, err)

	resp, err = c.PostForm(srv.URL+action, form)
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, resp.StatusCode, string(body))
	require.Contains(t, string(body), "changed hands meanwhile")
	var token int64
	require.NoError(t, s.DB.Pool.QueryRow(ctx, "SELECT fencing_token FROM distributed_locks WHERE lock_name = 'orders:42'").Scan(&token))
	require.Equal(t, newHolder.Token(), token, "the new holder keeps it")
}

// A semaphore's page, by its name or a place's, shows the places held and its waiters, each
// with its places and key; by its name, it sums them by key.
func TestASemaphoreShowsItsPlacesAndWaiters(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	holder, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{AppName: "place-holder"})
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(context.Background()) })
	place, err := holder.TryAcquirePlaces(ctx, "exports", tablelock.Places{Permits: 3, Take: 3, Key: "tenant-a"}, nil)
	require.NoError(t, err)
	waiter, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{AppName: "queued-exporter"})
	require.NoError(t, err)
	t.Cleanup(func() { waiter.Close(context.Background()) })
	acquired := make(chan error, 1)
	go func() {
		_, err := waiter.AcquirePlaces(ctx, "exports", tablelock.Places{Permits: 3, Take: 2, Key: "tenant-b"}, nil)
		acquired <- err
	}()
	testdb.WaitFor(t, func() bool {
		var places int
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/exports'").Scan(&places))
		return places == 1
	}, "queued")
	srv := mount(t, d.Pool, nil)
	for _, name := range []string{place.Name(), tablelock.SemaphorePrefix + "exports"} {
		r := get(t, srv, "/ops/lock?name="+url.QueryEscape(name))
		require.Equal(t, http.StatusOK, r.status, r.body)
		text := parse(t, r.body).text
		require.Contains(t, text, "place-holder@", name)
		require.Contains(t, text, "queued-exporter@", name)
		if name == place.Name() {
			require.NotContains(t, text, "Places by key", "a place's page shows that place only")
			continue
		}
		// Key, places held, holders, places wanted, waiters.
		require.Regexp(t, `tenant-a\s*3\s*1\s*0\s*0\s`, text, name)
		require.Regexp(t, `tenant-b\s*0\s*0\s*2\s*1\s`, text, name)
	}
	require.NoError(t, place.Release(ctx))
	require.NoError(t, testdb.Receive(t, acquired))
}

// A schedule's runs page by tick (keyset): every run once, newest first.
func TestASchedulesRunsPageByTick(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	s, err := cron.New(d.Pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Add("hourly", "@hourly", nil, func(context.Context, cron.Run) error { return nil }))
	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.Stop(ctx))
	_, err = d.Pool.Exec(ctx, `INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at, finished_at)
		SELECT 'hourly', date_trunc('hour', now()) - i * interval '1 hour', 'scheduled', 'missed', 0, now(), now()
		  FROM generate_series(1, 5) AS i`)
	require.NoError(t, err)
	srv := mount(t, d.Pool, nil)
	var ticks []string
	rows := 0
	next := "/ops/schedule?name=hourly&limit=2"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 4)
		r := get(t, srv, next)
		require.Equal(t, http.StatusOK, r.status, r.body)
		rows += strings.Count(parse(t, r.body).text, " missed ")
		next = ""
		for _, u := range parse(t, r.body).urls {
			if strings.Contains(u, "before_id=") {
				next = u + "&limit=2"
				q, err := url.ParseQuery(u[strings.Index(u, "?")+1:])
				require.NoError(t, err)
				ticks = append(ticks, q.Get("before"))
			}
		}
	}
	require.Equal(t, 5, rows, "every run once")
	require.Len(t, ticks, 2, "two full pages of two, then the last run alone")
	require.Greater(t, ticks[0], ticks[1], "newest first")
	require.Equal(t, http.StatusBadRequest, get(t, srv, "/ops/schedule?name=hourly&before=yesterday&before_id=1").status)
}

// Runtime schedules are created, updated and deleted from the cron pages' forms, each confirmed
// with a preview (a dry run) and a note, recorded with who did it and why; a bad definition is
// refused in the console's words (400), a taken name or a schedule in code is a conflict (409),
// and a read-only console offers none of it and refuses it all (403), writing nothing.
func TestRuntimeSchedulesFromTheConsole(t *testing.T) {
	t.Parallel()
	s := consoletest.Seed(t)
	ctx := testdb.Context(t)
	srv := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false },
		Operator: func(*http.Request) string { return "alice" }})
	c := client(t)
	definition := url.Values{"name": {"tenant-9"}, "kind": {"report"}, "spec": {"0 6 L * *"}, "zone": {"Europe/Berlin"},
		"args": {`{"tenant": 9}`}, "overlap": {"skip"}, "catch_up": {"latest"}, "timeout": {"5m"}, "jitter": {"30s"},
		"start": {""}, "end": {""}, "run_limit": {""}, "pause_after_failures": {"3"}}
	post := func(srv *httptest.Server, path string, form url.Values) response {
		resp, err := c.PostForm(srv.URL+path, form)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return response{resp.StatusCode, resp.Header, string(body)}
	}
	changes := func() []string {
		rows, err := s.DB.Pool.Query(ctx, `SELECT op || ' by ' || changed_by || ': ' || note FROM pglock_cron_changes ORDER BY id`)
		require.NoError(t, err)
		var list []string
		for rows.Next() {
			var c string
			require.NoError(t, rows.Scan(&c))
			list = append(list, c)
		}
		require.NoError(t, rows.Err())
		return list
	}

	form, _ := formOf(t, get(t, srv, "/ops/cron").body)
	require.Equal(t, "/ops/confirm/create", form, "the cron page offers the form")
	r := post(srv, "/ops/confirm/create", definition)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, `It checks out: 0 6 L * * in Europe/Berlin, run by the instances that handle kind "report".`)
	require.Empty(t, changes(), "a preview writes nothing")
	r = actVia(t, c, srv, "/ops/confirm/create", definition, url.Values{"note": {"new tenant"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	page := parse(t, r.body).text
	require.Contains(t, page, `Created "tenant-9"`)
	require.Contains(t, page, "Defined at runtime, kind report")
	require.Contains(t, page, "last changed by alice")
	require.Contains(t, page, "pauses after 3 failures in a row")

	for _, bad := range []struct {
		change url.Values
		status int
		says   string
	}{
		{url.Values{"spec": {"0 6 L * MON"}}, http.StatusBadRequest, "cannot be combined with a day of the week"},
		{url.Values{"args": {`{"tenant":`}}, http.StatusBadRequest, "Args are not JSON"},
		{url.Values{"jitter": {"soon"}}, http.StatusBadRequest, `jitter "soon"`},
		{url.Values{"zone": {"Mars/Olympus"}}, http.StatusBadRequest, "not a time zone name"},
		{url.Values{"name": {"rollup"}}, http.StatusConflict, "already exists"},
		{url.Values{"name": {"tenant-9"}}, http.StatusConflict, "already exists"},
	} {
		form := url.Values{}
		for k, v := range definition {
			form[k] = v
		}
		form.Set("name", "other")
		for k, v := range bad.change {
			form[k] = v
		}
		r := post(srv, "/ops/confirm/create", form)
		require.Equal(t, bad.status, r.status, "%v: %s", bad.change, r.body)
		require.Contains(t, parse(t, r.body).text, bad.says)
		require.NotContains(t, parse(t, r.body).text, "SQLSTATE")
	}

	action, fields := formOf(t, get(t, srv, "/ops/schedule?name=tenant-9").body)
	require.Equal(t, "/ops/confirm/update", action, "a runtime schedule's page offers its definition to edit")
	require.Equal(t, "tenant-9", fields.Get("name"))
	updated := url.Values{}
	for k, v := range definition {
		updated[k] = v
	}
	updated.Set("spec", "0 7 L * *")
	r = actVia(t, c, srv, "/ops/confirm/update", updated, url.Values{"note": {"later"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, "0 7 L * * in Europe/Berlin, jitter 30s")
	require.Equal(t, http.StatusConflict, post(srv, "/ops/confirm/update", url.Values{"name": {"rollup"}, "spec": {"@every 1s"}}).status,
		"a schedule in code is changed in its code")

	r = act(t, c, srv, "/ops/confirm/delete?name=tenant-9", url.Values{"note": {"tenant left"}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, parse(t, r.body).text, `Deleted "tenant-9".`)
	require.Equal(t, http.StatusNotFound, get(t, srv, "/ops/confirm/delete?name=tenant-9").status)
	require.Equal(t, []string{"define by alice: new tenant", "update by alice: later", "delete by alice: tenant left"}, changes())

	readOnly := mount(t, s.DB.Pool, nil)
	for _, path := range []string{"/ops/cron", "/ops/schedule?name=rollup"} {
		require.NotContains(t, get(t, readOnly, path).body, `method="post"`, path)
	}
	for _, path := range []string{"/ops/confirm/create", "/ops/do/create", "/ops/confirm/update", "/ops/do/update", "/ops/do/delete"} {
		form := url.Values{"note": {"n"}}
		for k, v := range definition {
			form[k] = v
		}
		require.Equal(t, http.StatusForbidden, post(readOnly, path, form).status, path)
	}
	require.Equal(t, http.StatusForbidden, get(t, readOnly, "/ops/confirm/delete?name=rollup").status)
	require.Len(t, changes(), 3, "refusals write nothing")
}
