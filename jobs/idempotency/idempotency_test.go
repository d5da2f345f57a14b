package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/jobs/idempotency"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// servers starts three instances of a service, each with a pool and a Deduper of its own,
// serving handler behind the middleware.
func servers(t *testing.T, d *testdb.DB, opts *idempotency.Options, handler http.Handler) []string {
	t.Helper()
	var urls []string
	for range 3 {
		dd, err := jobs.New(d.NewPool(t, nil), &jobs.Config{AppName: "api"})
		require.NoError(t, err)
		mw, err := idempotency.Middleware(dd, opts)
		require.NoError(t, err)
		srv := httptest.NewUnstartedServer(mw(handler))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a panicking handler's trace
		srv.Start()
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return urls
}

type answer struct {
	status   int
	replayed string
	location string
	trace    string
	body     string
	err      error
}

// post sends a payment with key; a key "k?query" sends key k to /payments?query.
func post(url, key, body string) answer {
	path := "/payments"
	if k, query, ok := strings.Cut(key, "?"); ok {
		key, path = k, path+"?"+query
	}
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if key != "" {
		req.Header.Set(idempotency.DefaultHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, replayed: resp.Header.Get(idempotency.ReplayedHeader),
		location: resp.Header.Get("Location"), trace: resp.Header.Get("X-Trace"), body: string(b), err: err}
}

// payments is a handler that records a payment per request it runs, in the database.
func payments(t *testing.T, pool *pgxpool.Pool, hold <-chan struct{}) http.Handler {
	_, err := pool.Exec(context.Background(), `CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY, body text)`)
	require.NoError(t, err)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if hold != nil {
			<-hold
		}
		var id int64
		if err := pool.QueryRow(r.Context(), `INSERT INTO payments (body) VALUES ($1) RETURNING id`, string(body)).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", id))
		w.Header().Set("X-Trace", "not kept")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
}

func count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM payments`).Scan(&n))
	return n
}

func TestConcurrentRequestsWithOneKeyRunTheHandlerOnceAndReplayItsResponse(t *testing.T) {
	t.Parallel()
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait %v", wait), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			hold := make(chan struct{})
			urls := servers(t, d, &idempotency.Options{Wait: wait}, payments(t, d.Pool, hold))

			const clients = 30
			answers := make(chan answer, clients)
			var wg sync.WaitGroup
			var inFlight atomic.Int32
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					inFlight.Add(1)
					answers <- post(urls[i%3], "pay-42", `{"cents":990}`)
				}()
			}
			if wait {
				// Every client waits for the first: release it once they have all been sent.
				require.Eventually(t, func() bool { return inFlight.Load() == clients }, 30*time.Second, 10*time.Millisecond)
				close(hold)
			}
			conflicts := 0
			var first answer
			byStatus := map[int]int{}
			for range clients {
				a := testdb.Receive(t, answers)
				require.NoError(t, a.err)
				byStatus[a.status]++
				switch {
				case a.status == http.StatusConflict:
					conflicts++
					if conflicts == clients-1 {
						close(hold) // every duplicate answered while the first runs
					}
				case a.status == http.StatusCreated && a.replayed == "":
					first = a
				}
			}
			wg.Wait()
			require.Equal(t, 1, count(t, d.Pool), "the handler ran once: %v", byStatus)
			require.Equal(t, "not kept", first.trace)
			if wait {
				require.Equal(t, clients, byStatus[http.StatusCreated], "every client got the response")
			} else {
				require.Equal(t, clients-1, conflicts, "every duplicate in flight got 409")
			}

			// Retries, on every instance, get the stored response.
			for _, url := range urls {
				a := post(url, "pay-42", `{"cents":990}`)
				require.NoError(t, a.err)
				require.Equal(t, http.StatusCreated, a.status)
				require.Equal(t, "true", a.replayed)
				require.Equal(t, first.body, a.body)
				require.Equal(t, first.location, a.location, "a kept header is replayed")
				require.Empty(t, a.trace, "a header not kept is not")
			}
			require.Equal(t, 1, count(t, d.Pool))
		})
	}
}

func TestRequestsThatCannotBeDeduplicatedGetTheirStatusAndStoreNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	urls := servers(t, d, &idempotency.Options{Required: true, MaxBody: 1024}, payments(t, d.Pool, nil))
	ok := post(urls[0], "k", `{"cents":1}`)
	require.NoError(t, ok.err)
	require.Equal(t, http.StatusCreated, ok.status)

	for _, tc := range []struct {
		name, key, body string
		status          int
	}{
		{"another request with the key", "k", `{"cents":2}`, http.StatusUnprocessableEntity},
		{"another query with the key", "k?amount=500", `{"cents":1}`, http.StatusUnprocessableEntity},
		{"a body over the limit", "big", strings.Repeat("x", 1025), http.StatusRequestEntityTooLarge},
		{"no key where one is required", "", `{}`, http.StatusBadRequest},
		{"a key over 1024 bytes", strings.Repeat("k", 1025), `{}`, http.StatusBadRequest},
	} {
		a := post(urls[1], tc.key, tc.body)
		require.NoError(t, a.err, tc.name)
		require.Equal(t, tc.status, a.status, tc.name)
		require.Contains(t, a.body, `"status":`, "%s: a problem details body", tc.name)
	}
	require.Equal(t, 1, count(t, d.Pool), "none ran the handler")
	var records int
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pglock_jobs`).Scan(&records))
	require.Equal(t, 1, records, "none was recorded")

	// A method outside Methods is served as it is.
	resp, err := http.Get(urls[2] + "/payments")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 2, count(t, d.Pool))
}

func TestServerErrorsAreNotStoredUnlessConfigured(t *testing.T) {
	t.Parallel()
	for _, store := range []bool{false, true} {
		t.Run(fmt.Sprintf("store %v", store), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			var calls atomic.Int32
			urls := servers(t, d, &idempotency.Options{StoreServerErrors: store}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					http.Error(w, "upstream down", http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			first := post(urls[0], "k", "{}")
			require.Equal(t, http.StatusServiceUnavailable, first.status)
			retry := post(urls[1], "k", "{}")
			if store {
				require.Equal(t, http.StatusServiceUnavailable, retry.status)
				require.Equal(t, "true", retry.replayed)
				require.EqualValues(t, 1, calls.Load())
			} else {
				require.Equal(t, http.StatusCreated, retry.status, "the retry ran the request again")
				require.Empty(t, retry.replayed)
				require.EqualValues(t, 2, calls.Load())
			}
		})
	}
}

func TestAHandlerThatPanicsStoresNothingAndTheRetryRunsIt(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var calls atomic.Int32
	urls := servers(t, d, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			panic("handler bug")
		}
		w.WriteHeader(http.StatusCreated)
	}))
	first := post(urls[0], "k", "{}")
	require.Error(t, first.err, "net/http ends the connection of a panicking handler")
	retry := post(urls[1], "k", "{}")
	require.NoError(t, retry.err)
	require.Equal(t, http.StatusCreated, retry.status)
	require.Empty(t, retry.replayed)
	require.EqualValues(t, 2, calls.Load())
	again := post(urls[2], "k", "{}")
	require.Equal(t, "true", again.replayed)
	require.EqualValues(t, 2, calls.Load())
}

func TestMiddlewareRefusesBadOptions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd, err := jobs.New(d.Pool, nil)
	require.NoError(t, err)
	for _, o := range []*idempotency.Options{{Header: "Bad Header"}, {MaxBody: -1}, {MaxResponse: -1},
		{Window: -time.Hour}, {Window: jobs.MaxWindow + time.Hour}, {Scope: strings.Repeat("s", 256)}, {Scope: "s\x00"}} {
		_, err := idempotency.Middleware(dd, o)
		require.True(t, errors.Is(err, pglock.ErrInvalidArgument), "%+v: %v", o, err)
	}
	_, err = idempotency.Middleware(dd, &idempotency.Options{TTL: time.Millisecond})
	require.ErrorIs(t, err, pglock.ErrInvalidTTL)
	_, err = idempotency.Middleware(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
}

// The clients' keys are apart from the service's own jobs: a client sending a job's key neither
// gets the job's result nor keeps the job from running.
func TestClientKeysAreApartFromTheServicesJobKeys(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	urls := servers(t, d, nil, payments(t, d.Pool, nil))
	dd, err := jobs.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = dd.Run(ctx, "invoice:42", nil, func(context.Context) error { return nil })
	require.NoError(t, err)
	a := post(urls[0], "invoice:42", "{}")
	require.Equal(t, http.StatusCreated, a.status)
	require.Empty(t, a.replayed, "the request ran")
	require.Equal(t, http.StatusCreated, post(urls[1], "invoice:44", "{}").status)
	ran := false
	res, err := dd.Run(ctx, "invoice:44", nil, func(context.Context) error { ran = true; return nil })
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, jobs.OutcomeRan, res.Outcome, "the job runs though a client used its key")
}
