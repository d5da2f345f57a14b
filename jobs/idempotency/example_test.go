package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/jobs/idempotency"
)

// A client retries a payment after its connection dropped: the retry gets the first request's
// response, marked replayed, and the payment is made once.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	dedup, err := jobs.New(pool, &jobs.Config{AppName: "payments-api"})
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idempotency.Middleware(dedup, nil)
	if err != nil {
		log.Fatal(err)
	}
	payments := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		payments++
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", payments))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, `{"status":"paid"}`)
	})
	srv := httptest.NewServer(idempotent(mux))
	defer srv.Close()

	for attempt := 1; attempt <= 2; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"cents":990}`))
		req.Header.Set("Idempotency-Key", "order-42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d %s replayed=%q %s", resp.StatusCode, resp.Header.Get("Location"),
			resp.Header.Get(idempotency.ReplayedHeader), body)
	}
	fmt.Println("payments made:", payments)
	// Output:
	// 201 /payments/1 replayed="" {"status":"paid"}
	// 201 /payments/1 replayed="true" {"status":"paid"}
	// payments made: 1
}
