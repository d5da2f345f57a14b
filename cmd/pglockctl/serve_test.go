package main

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

// syncBuffer is a bytes.Buffer that a command writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveConsole runs pglockctl serve with args until the test ends, and returns its address.
func serveConsole(t *testing.T, url string, args ...string) (addr string, stderr *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	stderr = &syncBuffer{}
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, append([]string{"--database-url", url, "serve"}, args...), &out, stderr) }()
	t.Cleanup(func() {
		cancel()
		require.Equal(t, 0, testdb.Receive(t, exited), "stops cleanly: %s", stderr)
	})
	at := regexp.MustCompile(`pglock console at http://(\S+)/`)
	testdb.WaitFor(t, func() bool { return at.MatchString(out.String()) }, "serving: %s", stderr)
	return at.FindStringSubmatch(out.String())[1], stderr
}

func getConsole(t *testing.T, addr, user, password string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	require.NoError(t, err)
	if user != "" || password != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// serve answers on loopback, read-only; elsewhere it needs a token or --insecure, which warns.
func TestServeIsSafeByDefault(t *testing.T) {
	d := testdb.New(t, nil)
	addr, _ := serveConsole(t, d.URL(), "--listen", "127.0.0.1:0")
	require.Equal(t, http.StatusOK, getConsole(t, addr, "", ""))
	resp, err := http.Post("http://"+addr+"/do/gc", "application/x-www-form-urlencoded", strings.NewReader(""))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "read-only")

	_, stderr, code := pglockctl(t, context.Background(), d.URL(), "serve", "--listen", "0.0.0.0:0")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, tokenEnv)

	_, warned := serveConsole(t, d.URL(), "--listen", "0.0.0.0:0", "--insecure")
	require.Contains(t, warned.String(), "WARNING: --insecure")
	_, stderr, code = pglockctl(t, context.Background(), d.URL(), "serve", "--listen", "0.0.0.0:0", "--insecure", "--allow-actions")
	require.Equal(t, exitUsage, code, "acting unauthenticated from anywhere")
	require.Contains(t, stderr, tokenEnv)

	acting, _ := serveConsole(t, d.URL(), "--listen", "127.0.0.1:0", "--allow-actions")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Post("http://"+acting+"/do/gc", "application/x-www-form-urlencoded", strings.NewReader(""))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "acting, then redirected")

	t.Setenv(tokenEnv, "s3cret")
	addr, _ = serveConsole(t, d.URL(), "--listen", "127.0.0.1:0")
	require.Equal(t, http.StatusUnauthorized, getConsole(t, addr, "", ""))
	require.Equal(t, http.StatusUnauthorized, getConsole(t, addr, "ops", "wrong"))
	require.Equal(t, http.StatusOK, getConsole(t, addr, "ops", "s3cret"))
}
