package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/jobs"
)

// The defaults of Options.
const (
	DefaultHeader      = "Idempotency-Key"
	DefaultMaxBody     = 1 << 20 // bytes of a request's body
	DefaultMaxResponse = 1 << 20 // bytes of a response's body that is stored
	DefaultWindow      = 24 * time.Hour
	// DefaultScope keeps the keys clients send apart from the service's own job keys: a
	// client's key never answers, nor is answered by, a job.
	DefaultScope = "pglock.idempotency"
)

// ReplayedHeader marks a response replayed from the first request's.
const ReplayedHeader = "Idempotent-Replayed"

// DefaultKeptHeaders are the response headers stored and replayed by default.
var DefaultKeptHeaders = []string{"Content-Type", "Content-Language", "Content-Encoding", "Location", "Cache-Control", "ETag", "Last-Modified"}

// Options configure the middleware. A nil *Options, and every zero field, means the default.
type Options struct {
	// Header names the request header that carries the key. Default: DefaultHeader.
	Header string
	// Required answers 400 to a request of one of Methods without the header. Default: false,
	// such a request is served as it is, without deduplication.
	Required bool
	// Methods are the methods deduplicated; others are served as they are. Default: POST and
	// PATCH, which the IETF draft names as the ones that are not idempotent.
	Methods []string
	// Fingerprint identifies what a request asks for, so that a key reused for another request
	// is refused (422). Default: DefaultFingerprint.
	Fingerprint func(r *http.Request, body []byte) string
	// MaxBody bounds a request's body, in bytes: a larger one is refused (413) before anything
	// is stored. Default: DefaultMaxBody.
	MaxBody int64
	// MaxResponse bounds the body of a response that is stored, in bytes: a larger response is
	// answered, and recorded as failed, so that a retry runs the request again. Default:
	// DefaultMaxResponse.
	MaxResponse int64
	// KeptHeaders are the response headers stored and replayed. Default: DefaultKeptHeaders.
	KeptHeaders []string
	// Wait makes a request whose key is in flight wait for the first request's response (bounded
	// by the request's context) instead of answering 409. Default: false.
	Wait bool
	// StoreServerErrors stores 5xx responses and replays them. Default: false: a 5xx answer is
	// recorded as a failure, and a retry with the key runs the request again.
	StoreServerErrors bool
	// Window is how long a key's response is kept and replayed. Default: DefaultWindow.
	Window time.Duration
	// Scope namespaces the keys (say, per API, or per tenant); keep it apart from the scopes of
	// the service's own jobs. At most jobs.MaxScopeLen characters. Default: DefaultScope.
	Scope string
	// TTL is the lease of a request in flight (see jobs.Options.TTL). Default: jobs.DefaultTTL.
	TTL time.Duration
}

// stored is a response as it is saved with the key's record.
type stored struct {
	Status int                 `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
}

// errNotStored fails the record of a response that is answered but not stored: a retry then
// runs the request again.
var errNotStored = errors.New("idempotency: response not stored")

// Middleware returns the middleware that makes requests carrying an idempotency key run their
// handler once per key, across every instance that shares d's database: the first request
// runs it (under a lease, jobs.Do), and its response (status, the kept headers and the body) is
// stored; a request with the same key and fingerprint then gets that response again, with
// ReplayedHeader "true". A request with the key while the first is in flight gets 409 Conflict
// (or, with Options.Wait, waits for it); the key with another fingerprint gets 422 Unprocessable
// Content; a body over Options.MaxBody gets 413 Content Too Large; a key that cannot be one
// (empty, over jobs.MaxKeyLen bytes, not UTF-8) or a missing one under Options.Required gets
// 400. Error responses are RFC 9457 problem details. A handler that panics stores nothing: the
// panic goes on up, and a retry runs the request again. Bad options get an error matching
// [pglock.ErrInvalidArgument].
func Middleware(d *jobs.Deduper, opts *Options) (func(http.Handler) http.Handler, error) {
	o, err := opts.withDefaults(d)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { o.serve(w, r, next) })
	}, nil
}

type config struct {
	Options
	d    *jobs.Deduper
	kept map[string]bool
}

func (o *Options) withDefaults(d *jobs.Deduper) (*config, error) {
	var c config
	if o != nil {
		c.Options = *o
	}
	c.d = d
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.Fingerprint == nil {
		c.Fingerprint = DefaultFingerprint
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxResponse == 0 {
		c.MaxResponse = DefaultMaxResponse
	}
	if c.KeptHeaders == nil {
		c.KeptHeaders = DefaultKeptHeaders
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Scope == "" {
		c.Scope = DefaultScope
	}
	invalid := func(format string, args ...any) (*config, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{pglock.ErrInvalidArgument}, args...)...)
	}
	switch {
	case d == nil:
		return invalid("nil Deduper")
	case http.CanonicalHeaderKey(c.Header) == "" || strings.ContainsAny(c.Header, " :\r\n\t"):
		return invalid("Options.Header %q is not a header name", c.Header)
	case c.MaxBody < 0:
		return invalid("Options.MaxBody (%d) must be positive", c.MaxBody)
	case c.MaxResponse < 0:
		return invalid("Options.MaxResponse (%d) must be positive", c.MaxResponse)
	case c.Window < time.Millisecond || c.Window > jobs.MaxWindow:
		return invalid("Options.Window (%s) must be from 1 ms to %s", c.Window, jobs.MaxWindow)
	case utf8.RuneCountInString(c.Scope) > jobs.MaxScopeLen || !utf8.ValidString(c.Scope) || strings.IndexByte(c.Scope, 0) >= 0:
		return invalid("Options.Scope %.40q must be at most %d characters of UTF-8 without NUL", c.Scope, jobs.MaxScopeLen)
	}
	if c.TTL != 0 {
		if _, err := lease.NewTiming(c.TTL, 0, 0); err != nil {
			return nil, fmt.Errorf("Options.TTL: %w", err)
		}
	}
	c.kept = map[string]bool{}
	for _, h := range c.KeptHeaders {
		c.kept[http.CanonicalHeaderKey(h)] = true
	}
	return &c, nil
}

// DefaultFingerprint is the method, the path with its query, and a SHA-256 of the body.
func DefaultFingerprint(r *http.Request, body []byte) string {
	sum := sha256.Sum256(body)
	return r.Method + " " + r.URL.RequestURI() + " " + hex.EncodeToString(sum[:])
}

func (c *config) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !slices.Contains(c.Methods, r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get(c.Header)
	if key == "" {
		if c.Required {
			problem(w, http.StatusBadRequest, "Idempotency key missing", fmt.Sprintf("This request needs the header %s.", c.Header))
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, c.MaxBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "Request body unreadable", err.Error())
		return
	}
	if int64(len(body)) > c.MaxBody {
		problem(w, http.StatusRequestEntityTooLarge, "Request body too large",
			fmt.Sprintf("A request with an idempotency key may have a body of at most %d bytes.", c.MaxBody))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	var ran *recorder // the response of this request's run of the handler, stored or not
	opts := &jobs.Options{Scope: c.Scope, Window: c.Window, TTL: c.TTL, Wait: c.Wait, Fingerprint: c.Fingerprint(r, body)}
	saved, res, err := jobs.Do(r.Context(), c.d, key, opts, func(ctx context.Context) (stored, error) {
		ran = &recorder{header: http.Header{}, status: http.StatusOK, limit: c.MaxResponse}
		next.ServeHTTP(ran, r.WithContext(ctx))
		switch {
		case ran.overflow:
			return stored{}, fmt.Errorf("%w: the response's body is over %d bytes", errNotStored, c.MaxResponse)
		case ran.status >= 500 && !c.StoreServerErrors:
			return stored{}, fmt.Errorf("%w: status %d", errNotStored, ran.status)
		}
		return ran.stored(c.kept), nil
	})
	switch {
	case ran != nil:
		// This request ran the handler: its response goes out, whether or not it was stored.
		ran.send(w)
	case errors.Is(err, pglock.ErrFingerprintMismatch):
		problem(w, http.StatusUnprocessableEntity, "Idempotency key reused",
			"This idempotency key was used for another request.")
	case errors.Is(err, pglock.ErrInvalidArgument):
		problem(w, http.StatusBadRequest, "Idempotency key invalid",
			fmt.Sprintf("An idempotency key is 1 to %d bytes of UTF-8 without NUL.", jobs.MaxKeyLen))
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "Idempotency key not checked", "The request was not run: try it again.")
	case res.Outcome == jobs.OutcomeInProgress:
		problem(w, http.StatusConflict, "Request in progress",
			"A request with this idempotency key is being processed: retry once it has finished.")
	case saved.Status < 200 || saved.Status > 999:
		// Not a response this middleware stored: the key's record is another kind of job's.
		problem(w, http.StatusUnprocessableEntity, "Idempotency key reused",
			"This idempotency key was used for another request.")
	default: // OutcomeAlreadyDone
		h := w.Header()
		for k, v := range saved.Header {
			h[k] = v
		}
		h.Set(ReplayedHeader, "true")
		w.WriteHeader(saved.Status)
		_, _ = w.Write(saved.Body)
	}
}

// recorder is the ResponseWriter a request's run of the handler writes to: its response is sent
// once the run has been recorded. Its body is kept whole, for the client; past limit, it is no
// longer storable.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
	limit       int64
	overflow    bool
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if status < 200 {
		return // informational (103 Early Hints): not the response
	}
	if !rec.wroteHeader {
		rec.status, rec.wroteHeader = status, true
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	rec.overflow = rec.overflow || int64(rec.body.Len()+len(p)) > rec.limit
	return rec.body.Write(p)
}

// stored is the response as it is stored: the status, the kept headers and the body.
func (rec *recorder) stored(kept map[string]bool) stored {
	s := stored{Status: rec.status, Body: rec.body.Bytes(), Header: map[string][]string{}}
	for k, v := range rec.header {
		if kept[k] {
			s.Header[k] = v
		}
	}
	return s
}

// send writes the response to w, as the handler wrote it.
func (rec *recorder) send(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range rec.header {
		h[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// problem answers status with an RFC 9457 problem details body.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
}
