package console_test

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/console"
	"github.com/pglock/pglock/internal/consoletest"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

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

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
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
		{"/ops/", []string{"2 table locks", "1 advisory locks", "1 schedules", "1 elections", "orders:42"}},
		{"/ops/locks", []string{"orders:42", "console-test@", `{"owner": "billing"}`, "pglock.leader/reconciler", "nightly-report", "exclusive", "granted"}},
		{"/ops/locks?name=orders", []string{"orders:42"}},
		{"/ops/jobs", []string{"invoice:1", "succeeded", "invoice:2", "failed", "card declined <script>"}},
		{"/ops/jobs?scope=billing&status=failed&key=invoice:*", []string{"invoice:2"}},
		{"/ops/job?scope=billing&key=invoice:2", []string{"invoice:2", "failed", "card declined <script>", "Attempts 1"}},
		{"/ops/cron", []string{"rollup", "@every 1s", "UTC", "skip", "active", "failed"}},
		{"/ops/schedule?name=rollup", []string{"rollup failed: disk full", "scheduled", "console-test@"}},
		{"/ops/leaders", []string{"reconciler", "console-test@"}},
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
			require.NotContains(t, r.body, "<script>alert", "text is escaped")
			require.NotContains(t, r.body, "card declined <script>", "text is escaped")
		})
	}
	require.NotContains(t, parse(t, get(t, srv, "/ops/locks?name=nothing-like-it").body).text, "orders:42")
	require.NotContains(t, parse(t, get(t, srv, "/ops/jobs?status=succeeded").body).text, "invoice:2")
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
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(url.Values{"name": {"orders:42"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return do(t, req)
	}
	r := post(readOnly, "/ops/locks/release", nil)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, r.body, "read-only")
	require.NoError(t, s.Lock.Err(), "nothing was written")
	require.Contains(t, parse(t, get(t, readOnly, "/ops/locks").body).text, "orders:42")

	acting := mount(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false }})
	r = post(acting, "/ops/locks/release", map[string]string{"Sec-Fetch-Site": "cross-site"})
	require.Equal(t, http.StatusForbidden, r.status)
	require.NotContains(t, r.body, "read-only", "refused as cross-origin")
	r = post(acting, "/ops/locks/release", map[string]string{"Origin": "https://evil.example"})
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, parse(t, get(t, acting, "/ops/").body).text, "actions allowed")
}

// A Host header the console does not serve is refused: a page elsewhere cannot reach it by
// rebinding its DNS name to 127.0.0.1.
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
	} {
		srv := mount(t, d.Pool, &console.Options{AllowedHosts: c.allowed})
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/ops/", nil)
		require.NoError(t, err)
		req.Host = c.host
		require.Equal(t, c.status, do(t, req).status, "%v %s", c.allowed, c.host)
	}
	_, err := console.New(d.Pool, &console.Options{AllowedHosts: []string{"a b"}})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = console.New(nil, nil)
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
