package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
)

// DefaultRefreshInterval is how often pages refresh their tables unless Options says otherwise.
const DefaultRefreshInterval = 2 * time.Second

// Options configure a console. A nil *Options, and every zero field, means the default.
type Options struct {
	// ReadOnly says whether a request may only read. It is the server that refuses actions:
	// a POST from a read-only request gets 403 whatever its page showed. Default: every request
	// is read-only.
	ReadOnly func(r *http.Request) bool

	// AllowedHosts are the hosts the console answers; requests for others get 421, so that a
	// page on another site cannot reach it through DNS rebinding. An entry is a name or an
	// address, on any port, or with ":port" on that port only; an IPv6 address with or without
	// brackets ("[::1]", "::1", "[::1]:8080"); names match in any case. Default: the loopback
	// hosts, localhost, 127.0.0.1 and [::1], on any port.
	AllowedHosts []string

	// RefreshInterval is how often pages refresh their tables, with JavaScript on. Negative: never.
	// Default: DefaultRefreshInterval.
	RefreshInterval time.Duration

	// Operator names who makes a request, as actions are logged and recorded with (a pause's
	// "by", a trigger's "requested_by"). Default: "console:" and the user name of HTTP basic
	// authentication, else "console@" and the client's address.
	Operator func(r *http.Request) string

	// Logger receives the console's logs, actions among them. Default: slog.Default().
	Logger *slog.Logger
}

//go:embed templates static
var files embed.FS

// console serves the pages of one database.
type console struct {
	pool    *pgxpool.Pool
	opts    Options
	pages   map[string]*template.Template
	static  http.Handler
	refresh time.Duration
	hosts   []hostPort // AllowedHosts, or the loopback hosts, read once
}

// hostPort is a host as splitHost reads it.
type hostPort struct{ name, port string }

// New returns the console of the database pool reaches, as an http.Handler to mount under any
// prefix (with http.StripPrefix: links and forms stay under it).
func New(pool *pgxpool.Pool, opts *Options) (http.Handler, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.ReadOnly == nil {
		o.ReadOnly = func(*http.Request) bool { return true }
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = DefaultRefreshInterval
	}
	if o.Operator == nil {
		o.Operator = operator
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	allowed := o.AllowedHosts
	if len(allowed) == 0 {
		allowed = loopbackHosts
	}
	var hosts []hostPort
	for _, h := range allowed {
		name, port := splitHost(h)
		if name == "" || strings.ContainsAny(h, "/ ") || strings.Trim(port, "0123456789") != "" {
			return nil, errs.Errorf("%w: Options.AllowedHosts: %q is not a host", pglock.ErrInvalidArgument, h)
		}
		hosts = append(hosts, hostPort{name, port})
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	staticFiles, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	c := &console{pool: pool, opts: o, pages: pages, static: http.FileServerFS(staticFiles), refresh: o.RefreshInterval, hosts: hosts}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /locks", c.locks)
	mux.HandleFunc("GET /lock", c.lock)
	mux.HandleFunc("GET /jobs", c.jobs)
	mux.HandleFunc("GET /job", c.job)
	mux.HandleFunc("GET /cron", c.schedules)
	mux.HandleFunc("GET /schedule", c.schedule)
	mux.HandleFunc("GET /leaders", c.leaders)
	mux.HandleFunc("GET /ratelimits", c.rateLimits)
	mux.Handle("GET /static/", http.StripPrefix("/static/", c.static))
	mux.HandleFunc("GET /confirm/{action}", c.confirm)
	mux.HandleFunc("POST /confirm/{action}", c.confirm) // a preview runs queries: a form POST, never a link
	mux.HandleFunc("POST /do/{action}", c.doAction)
	mux.HandleFunc("POST /", c.doAction) // refused: read-only, or no such action
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, errors.New("no such page"))
	})
	return c.guard(http.NewCrossOriginProtection().Handler(mux)), nil
}

// textOnly refuses a request whose query or form holds what PostgreSQL text cannot: a NUL
// byte, or bytes that are not UTF-8 (the database would refuse them in its own words).
func textOnly(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("%w: the form cannot be read: %w", pglock.ErrInvalidArgument, err)
	}
	for name, values := range r.Form {
		for _, v := range append([]string{name}, values...) {
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return fmt.Errorf("%w: %q holds a NUL byte or bytes that are not UTF-8, which no name or note can", pglock.ErrInvalidArgument, name)
			}
		}
	}
	return nil
}

// guard checks the Host header and sets the headers every answer carries.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !c.hostAllowed(r.Host) {
			c.opts.Logger.Warn("pglock console: refused a request for another host", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, "pglock console: this host name is not served here", http.StatusMisdirectedRequest)
			return
		}
		if err := textOnly(r); err != nil {
			c.fail(w, r, http.StatusBadRequest, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *console) hostAllowed(host string) bool {
	name, port := splitHost(host)
	return slices.ContainsFunc(c.hosts, func(a hostPort) bool {
		return a.name == name && (a.port == "" || a.port == port)
	})
}

// loopbackHosts are the hosts the console answers by default, on any port.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// splitHost reads a Host header, or an entry of AllowedHosts, one way: a name or an address,
// with an optional port; IPv6 addresses with or without brackets ("[::1]", "::1", "[::1]:8080");
// names in any case (DNS names are case-insensitive).
func splitHost(host string) (name, port string) {
	name, port, err := net.SplitHostPort(host)
	if err != nil { // no port
		name, port = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ""
	}
	return strings.ToLower(name), port
}
