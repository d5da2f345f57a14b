package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/console"
	"github.com/pglock/pglock/internal/consoletest"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// screenshotsEnv names a directory the tests write their screenshots to (docs/console).
const screenshotsEnv = "PGLOCK_CONSOLE_SCREENSHOTS"

// browser is a headless Chromium tab, and what its pages reported: JavaScript exceptions and
// console or security errors (a CSP violation is one).
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is not installed (.ci/run installs Debian's chromium): %v", err)
		}
		t.Skipf("chromium is not installed: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, "exception: "+ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Source == log.EntrySourceSecurity {
				b.problems = append(b.problems, fmt.Sprintf("%s %s: %s (%s)", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				b.problems = append(b.problems, "console.error")
			}
		}
	}))
	_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	require.NoError(t, err)
	_, err = chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	require.NoError(t, err)
	return b
}

// do runs steps in the tab, each page bounded.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// get runs an action that answers, in the tab.
func get[T any](t *testing.T, b *browser, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	require.NoError(t, err)
	return v
}

func (b *browser) requireNoProblems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(t, b.problems, "JavaScript errors or CSP violations")
}

// open serves the console of pool with opts and opens a browser tab for it: the console's base
// URL, and the tab.
func open(t *testing.T, pool *pgxpool.Pool, opts *console.Options) (string, *browser) {
	t.Helper()
	h, err := console.New(pool, opts)
	require.NoError(t, err)
	return serve(t, h), newBrowser(t)
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/ops/"
}

// Every page loads with no JavaScript error and no CSP violation, and its script runs (the
// pause button it reveals works); the overview, locks, jobs, cron, leaders and a semaphore's
// pages are photographed when screenshotsEnv names a directory.
func TestEveryPageLoadsCleanlyInABrowser(t *testing.T) {
	s := consoletest.Seed(t)
	base, b := open(t, s.DB.Pool, nil)
	shots := os.Getenv(screenshotsEnv)
	for _, p := range []struct{ path, shot string }{
		{"", "overview"}, {"locks", "locks"}, {"jobs", "jobs"}, {"job?scope=billing&key=invoice:2", ""},
		{"cron", "cron"}, {"schedule?name=rollup", ""}, {"leaders", "leaders"}, {"ratelimits", ""},
		{"lock?name=pglock.semaphore/exports", "semaphore"},
	} {
		b.do(t, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS("#refresh-toggle")),
			chromedp.Click(chromedp.CSS("#refresh-toggle")))
		require.Equal(t, "Resume refresh", get(t, b, chromedp.Text(chromedp.CSS("#refresh-toggle"))), p.path)
		if shots != "" && p.shot != "" {
			b.do(t, chromedp.Click(chromedp.CSS("#refresh-toggle")))
			png := get(t, b, chromedp.FullScreenshot(100))
			require.NoError(t, os.WriteFile(filepath.Join(shots, p.shot+".png"), png, 0o644))
		}
	}
	b.requireNoProblems(t)
}

// A lock released by another pool leaves the open page at its next refresh, without a reload;
// in read-only mode no form posts, and a POST forged from the page gets 403.
func TestAReleasedLockLeavesTheOpenPageAndForgedPostsAreRefused(t *testing.T) {
	s := consoletest.Seed(t)
	base, b := open(t, s.DB.Pool, &console.Options{RefreshInterval: 500 * time.Millisecond})
	b.do(t, chromedp.Navigate(base+"locks"), chromedp.WaitVisible(chromedp.CSS(`tr[data-lock="orders:42"]`)))
	get(t, b, chromedp.Evaluate[string](`document.title = "before"`))
	require.Equal(t, 0.0, get(t, b, chromedp.Evaluate[float64](`document.querySelectorAll('form[method="post"]').length`)),
		"read-only: nothing to post")
	require.NoError(t, s.Lock.Release(testdb.Context(t)))
	b.do(t, chromedp.WaitNotPresent(chromedp.CSS(`tr[data-lock="orders:42"]`)))
	require.Equal(t, "before", get(t, b, chromedp.Title()), "refreshed in place, not reloaded")
	b.requireNoProblems(t) // before the forged POST, whose 403 the browser logs as a failed load

	status := get(t, b, chromedp.Evaluate[float64](
		`fetch("do/release", {method: "POST", body: new URLSearchParams({name: "pglock.leader/reconciler", token: "1"})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	require.Equal(t, float64(http.StatusForbidden), status)
}

// A lock's own page, left open, says that nobody holds it at the next refresh after its
// release, with no error in the browser (the refresh once met a 404 and kept the old holder).
func TestAnOpenLockPageFollowsItsRelease(t *testing.T) {
	s := consoletest.Seed(t)
	base, b := open(t, s.DB.Pool, &console.Options{RefreshInterval: 500 * time.Millisecond})
	b.do(t, chromedp.Navigate(base+"lock?name=orders:42"), chromedp.WaitVisible(chromedp.CSS("table.record")))
	require.NoError(t, s.Lock.Release(testdb.Context(t)))
	b.do(t, chromedp.WaitNotPresent(chromedp.CSS("table.record")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS("main"))), "Nobody holds it.")
	b.requireNoProblems(t)
}

// Pausing asks why: without a note it is refused (by the browser, and by the server when the
// browser is bypassed), with one the schedule shows it. Running a schedule now asks for
// confirmation, and the run appears in its history.
func TestPauseNeedsANoteAndRunNowIsConfirmed(t *testing.T) {
	s := consoletest.Seed(t)
	base, b := open(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false },
		Operator: func(*http.Request) string { return "browser-test" }})

	b.do(t, chromedp.Navigate(base+"schedule?name=rollup"), chromedp.Click(chromedp.CSS(`a[href*="confirm/pause"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm")), chromedp.Click(chromedp.CSS("#confirm")))
	require.Contains(t, get(t, b, chromedp.Location()), "/confirm/pause", "the browser keeps the form: a note is required")
	b.requireNoProblems(t) // before the POST forged below, whose 400 the browser logs as a failed load
	status := get(t, b, chromedp.Evaluate[float64](
		`fetch(document.querySelector("form").action, {method: "POST", body: new URLSearchParams({name: "rollup", note: " "})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	require.Equal(t, float64(http.StatusBadRequest), status, "and the server refuses a blank one")
	b.do(t, chromedp.SendKeys(chromedp.CSS("textarea[name=note]"), "disk full, see INC-7"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".done")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS("main"))), "disk full, see INC-7 by browser-test")

	b.do(t, chromedp.Click(chromedp.CSS(`a[href*="confirm/trigger"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS("h1"))), `Run schedule "rollup" now`)
	b.do(t, chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS(".done")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS(".done"))), `Triggered "rollup"`)
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS("#runs"))), "manual by browser-test")
}

// A runtime schedule is created from the cron page's form (its preview checked, a note asked
// for), edited from its page and deleted, with no JavaScript error or CSP violation; the form,
// filled in, is photographed when screenshotsEnv names a directory.
func TestARuntimeScheduleIsCreatedEditedAndDeletedInTheBrowser(t *testing.T) {
	s := consoletest.Seed(t)
	base, b := open(t, s.DB.Pool, &console.Options{ReadOnly: func(*http.Request) bool { return false },
		Operator: func(*http.Request) string { return "browser-test" }})
	b.do(t, chromedp.Navigate(base+"cron"), chromedp.WaitVisible(chromedp.CSS("#create")),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=name]`), "tenant-42"),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=kind]`), "monthly-report"),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=spec]`), "0 6 L * *"),
		chromedp.SetValue(chromedp.CSS(`#create input[name=zone]`), "Europe/Berlin"),
		chromedp.SendKeys(chromedp.CSS(`#create textarea[name=args]`), `{"tenant": 42}`),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=jitter]`), "10m"),
		chromedp.SendKeys(chromedp.CSS(`#create input[name=pause_after_failures]`), "3"))
	if shots := os.Getenv(screenshotsEnv); shots != "" {
		png := get(t, b, chromedp.FullScreenshot(100))
		require.NoError(t, os.WriteFile(filepath.Join(shots, "cron-create.png"), png, 0o644))
	}
	b.do(t, chromedp.Click(chromedp.CSS(`#create button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS(".preview"))), "It checks out: 0 6 L * * in Europe/Berlin")
	b.do(t, chromedp.Click(chromedp.CSS("#confirm")))
	require.Contains(t, get(t, b, chromedp.Location()), "/confirm/create", "the browser keeps the form: a note is required")
	b.do(t, chromedp.SendKeys(chromedp.CSS("textarea[name=note]"), "tenant 42 signed up"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".done")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS(".done"))), `Created "tenant-42"`)
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS("main"))), "last changed by browser-test")

	b.do(t, chromedp.SetValue(chromedp.CSS(`#update input[name=spec]`), "0 7 L * *"),
		chromedp.Click(chromedp.CSS(`#update button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.SendKeys(chromedp.CSS("textarea[name=note]"), "an hour later"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".done")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS(".done"))), `Updated "tenant-42": 0 7 L * *`)

	b.do(t, chromedp.Click(chromedp.CSS(`a[href*="confirm/delete"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.SendKeys(chromedp.CSS("textarea[name=note]"), "tenant 42 left"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".done")))
	require.Contains(t, get(t, b, chromedp.Text(chromedp.CSS(".done"))), `Deleted "tenant-42".`)
	require.NotContains(t, get(t, b, chromedp.Text(chromedp.CSS("#schedules"))), "tenant-42")
	b.requireNoProblems(t)
}
