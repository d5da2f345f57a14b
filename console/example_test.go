package console_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/console"
)

// The console mounted under /pglock/ of an application's own server: read-only, and served to
// loopback hosts only, unless Options say otherwise.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	handler, err := console.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/pglock/", http.StripPrefix("/pglock", handler))
	server := httptest.NewServer(mux)
	defer server.Close()

	resp, err := http.Get(server.URL + "/pglock/locks")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"))
	// Output: 200 true
}
