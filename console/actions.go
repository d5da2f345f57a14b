package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/ops"
)

// An action is something an operator does from the console: the same effect as a pglockctl
// command. Each asks for confirmation on a page of its own (which works without JavaScript),
// is a POST that the server refuses in read-only mode, is logged with who did it, and redirects
// to the page that shows its effect.
type action struct {
	title    string   // what the confirmation page asks, with the target (its fields, in order)
	explain  string   // what it will do
	fields   []string // the form fields it carries
	optional []string // and those it carries that may be empty
	needNote bool     // a note (why) is required
	// exists, when set, says whether the target is there (an error matching pglock.ErrNotFound
	// if not), so that the confirmation page of an unknown target is a 404 at once.
	exists func(c *console, r *http.Request, f url.Values) error
	// preview, when set, says on the confirmation page what the action would do now.
	preview func(c *console, r *http.Request, f url.Values) (string, error)
	// do performs it and returns what to tell the operator, and where to go next.
	do func(c *console, r *http.Request, f url.Values, by string) (done, next string, err error)
}

var actions = map[string]action{
	"release": {
		title: "Force-release table lock %q", fields: []string{"name", "token"},
		explain: "Its holder loses it: it is told so at its next renewal (up to a third of its TTL away), and must stop; the next waiter gets it with a larger token.",
		exists:  func(c *console, r *http.Request, f url.Values) error { return tableLockHeld(c, r, f.Get("name")) },
		do: func(c *console, r *http.Request, f url.Values, _ string) (string, string, error) {
			token, err := strconv.ParseInt(f.Get("token"), 10, 64)
			if err != nil {
				return "", "", fmt.Errorf("%w: token %q is not a fencing token", pglock.ErrInvalidArgument, f.Get("token"))
			}
			rel, err := ops.ForceRelease(r.Context(), c.pool, f.Get("name"), &token)
			if errors.Is(err, pglock.ErrNotHeld) { // gone, not changed: as an unknown lock
				return "", "", fmt.Errorf("%w: nobody holds table lock %q: nothing was done", pglock.ErrNotFound, f.Get("name"))
			}
			if err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Released %q from %s, token %d.", f.Get("name"), rel.Instance, rel.Token), "locks", nil
		},
	},
	"terminate": {
		title: "End the backend %s holding advisory lock %s", fields: []string{"pid", "key"},
		explain: "PostgreSQL ends the session, and every lock it holds, advisory or not, with it; its transaction rolls back.",
		exists: func(c *console, r *http.Request, f url.Values) error {
			_, err := advisoryHolder(c, r, f)
			return err
		},
		do: func(c *console, r *http.Request, f url.Values, _ string) (string, string, error) {
			pid, err := advisoryHolder(c, r, f)
			if err != nil {
				return "", "", err
			}
			if err := ops.Terminate(r.Context(), c.pool, pid); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Ended backend %d, which held advisory lock %s.", pid, f.Get("key")), "locks", nil
		},
	},
	"forget": {
		title: "Forget job %[2]q of scope %[1]q", fields: []string{"scope", "key"},
		explain: "Its record is deleted: its next delivery runs it again. A Run attempt under way loses its lease; a RunTx under way finishes first.",
		exists: func(c *console, r *http.Request, f url.Values) error {
			_, _, err := ops.GetJob(r.Context(), c.pool, f.Get("scope"), f.Get("key"))
			return err
		},
		do: func(c *console, r *http.Request, f url.Values, _ string) (string, string, error) {
			if err := ops.Forget(r.Context(), c.pool, f.Get("scope"), f.Get("key")); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Forgot job %q of scope %q.", f.Get("key"), f.Get("scope")), "jobs", nil
		},
	},
	"pause": {
		title: "Pause schedule %q", fields: []string{"name"}, needNote: true,
		explain: "From its next tick, every instance records its ticks as skipped, with your note, until it is resumed.",
		exists:  scheduleExists,
		do: func(c *console, r *http.Request, f url.Values, by string) (string, string, error) {
			if err := ops.Pause(r.Context(), c.pool, f.Get("name"), f.Get("note"), by); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Paused %q: %s", f.Get("name"), f.Get("note")), "schedule?name=" + url.QueryEscape(f.Get("name")), nil
		},
	},
	"resume": {
		title: "Resume schedule %q", fields: []string{"name"},
		explain: "It runs again from its next tick; ticks that came while it was paused stay skipped.",
		exists:  scheduleExists,
		do: func(c *console, r *http.Request, f url.Values, _ string) (string, string, error) {
			if err := ops.Resume(r.Context(), c.pool, f.Get("name")); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Resumed %q.", f.Get("name")), "schedule?name=" + url.QueryEscape(f.Get("name")), nil
		},
	},
	"trigger": {
		title: "Run schedule %q now", fields: []string{"name"},
		explain: "A manual run is queued, and starts on some instance as soon as its turn comes (it is never one of the schedule's ticks).",
		exists:  scheduleExists,
		do: func(c *console, r *http.Request, f url.Values, by string) (string, string, error) {
			id, err := ops.Trigger(r.Context(), c.pool, f.Get("name"), by)
			if err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Triggered %q: run %d.", f.Get("name"), id), "schedule?name=" + url.QueryEscape(f.Get("name")), nil
		},
	},
	"backfill": {
		title: "Backfill schedule %q from %s to %s", fields: []string{"name", "from", "to"},
		explain: "Each tick of the schedule in that range (both ends included, UTC) that did not run or fail, and is not running or queued, is queued; instances run them oldest first.",
		exists:  scheduleExists,
		preview: func(c *console, r *http.Request, f url.Values) (string, error) {
			from, to, err := backfillRange(f)
			if err != nil {
				return "", err
			}
			n, err := ops.PreviewBackfill(r.Context(), c.pool, f.Get("name"), from, to)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("As of now, it will queue %d ticks.", n), nil
		},
		do: func(c *console, r *http.Request, f url.Values, by string) (string, string, error) {
			from, to, err := backfillRange(f)
			if err != nil {
				return "", "", err
			}
			n, err := ops.Backfill(r.Context(), c.pool, f.Get("name"), from, to, by)
			if err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Queued %d ticks of %q.", n, f.Get("name")), "schedule?name=" + url.QueryEscape(f.Get("name")), nil
		},
	},
	"resign": {
		title: "Make the leader of election %q resign (term %s)", fields: []string{"election", "term"},
		explain: "Its lock is released: the leader is told at its next renewal and must stop, and the next candidate is elected with a larger term.",
		exists: func(c *console, r *http.Request, f url.Values) error {
			err := tableLockHeld(c, r, ops.ElectionLock(f.Get("election")))
			if errors.Is(err, pglock.ErrNotFound) { // named by the election, not its lock
				err = fmt.Errorf("%w: election %q has no leader", pglock.ErrNotFound, f.Get("election"))
			}
			return err
		},
		do: func(c *console, r *http.Request, f url.Values, _ string) (string, string, error) {
			// A term is its election's lock's token: released with that token, or not at all.
			election := f.Get("election")
			term, err := strconv.ParseInt(f.Get("term"), 10, 64)
			if err != nil {
				return "", "", fmt.Errorf("%w: term %q is not a term", pglock.ErrInvalidArgument, f.Get("term"))
			}
			rel, err := ops.Resign(r.Context(), c.pool, election, &term)
			if errors.Is(err, pglock.ErrNotHeld) { // gone, not changed: as an unknown election
				return "", "", fmt.Errorf("%w: election %q has no leader: nothing was done", pglock.ErrNotFound, election)
			}
			if err != nil {
				return "", "", err
			}
			return fmt.Sprintf("The leader of %q (%s, term %d) was made to resign.", election, rel.Instance, rel.Token), "leaders", nil
		},
	},
	"create": {
		title: "Create schedule %[1]q", fields: []string{"name"}, optional: definitionFields, needNote: true,
		explain: "The instances that handle its kind run it, each tick once, from its first tick after now (or its start).",
		preview: definitionPreview(newDefinition, ops.Define),
		do:      definitionDo(newDefinition, ops.Define, "Created"),
	},
	"update": {
		title: "Update schedule %[1]q", fields: []string{"name"}, optional: definitionFields, needNote: true,
		explain: "Every instance runs it as the new definition says from its next tick: no tick of the old spec starts once this is done.",
		exists:  runtimeSchedule,
		preview: definitionPreview(updatedDefinition, ops.Update),
		do:      definitionDo(updatedDefinition, ops.Update, "Updated"),
	},
	"delete": {
		title: "Delete schedule %q", fields: []string{"name"}, needNote: true,
		explain: "It and its history are deleted: no tick of it starts once this is done, and a run under way loses its lease.",
		exists:  runtimeSchedule,
		do: func(c *console, r *http.Request, f url.Values, by string) (string, string, error) {
			if err := ops.Delete(r.Context(), c.pool, f.Get("name"), &cron.Change{By: by, Note: f.Get("note")}); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Deleted %q.", f.Get("name")), "cron", nil
		},
	},
	"gc": {
		title:   "Collect garbage",
		explain: "Expired lock rows and waiter places, job records past their retention and cron runs past theirs are deleted.",
		do: func(c *console, r *http.Request, _ url.Values, _ string) (string, string, error) {
			n, err := ops.Collect(r.Context(), c.pool)
			if err != nil {
				return "", "", err
			}
			return fmt.Sprintf("Deleted %d expired locks, %d waiter places, %d job records and %d cron runs.",
				n.ExpiredLocks, n.ExpiredWaiters, n.ExpiredJobs, n.ExpiredCronRuns), "", nil
		},
	},
}

// tableLockHeld is nil if someone holds the table lock name, else an error matching
// [pglock.ErrNotFound].
func tableLockHeld(c *console, r *http.Request, name string) error {
	locks, _, err := ops.Lock(r.Context(), c.pool, name)
	if err == nil && len(locks.TableLocks) == 0 {
		err = fmt.Errorf("%w: nobody holds %q", pglock.ErrNotFound, name)
	}
	return err
}

// definitionFields are the form fields of a runtime schedule's definition.
var definitionFields = []string{"kind", "spec", "zone", "args", "overlap", "catch_up", "timeout", "jitter", "start", "end",
	"run_limit", "pause_after_failures"}

// formDefinition is def with the form's definition fields written into it: an empty field is
// the default.
func formDefinition(def cron.Definition, f url.Values) (cron.Definition, error) {
	invalid := func(field string, err error) (cron.Definition, error) {
		return cron.Definition{}, fmt.Errorf("%w: %s %q: %v", pglock.ErrInvalidArgument, field, f.Get(field), err)
	}
	if def.Options == nil {
		def.Options = &cron.Options{}
	}
	o := def.Options
	def.Kind, def.Spec, def.Args = f.Get("kind"), f.Get("spec"), nil
	if a := strings.TrimSpace(f.Get("args")); a != "" {
		def.Args = json.RawMessage(a)
	}
	o.Location = time.UTC
	if z := f.Get("zone"); z != "" && z != "UTC" {
		loc, err := time.LoadLocation(z)
		if err != nil || z == "Local" {
			return invalid("zone", errors.New("not a time zone name such as Europe/Berlin"))
		}
		o.Location = loc
	}
	o.Overlap, o.CatchUp = cron.Overlap(f.Get("overlap")), cron.CatchUp(f.Get("catch_up"))
	for field, d := range map[string]*time.Duration{"timeout": &o.Timeout, "jitter": &o.Jitter} {
		*d = 0
		if v := f.Get(field); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil {
				return invalid(field, err)
			}
			*d = parsed
		}
	}
	for field, n := range map[string]*int{"run_limit": &o.RunLimit, "pause_after_failures": &o.PauseAfterFailures} {
		*n = 0
		if v := f.Get(field); v != "" {
			parsed, err := strconv.Atoi(v)
			if err != nil {
				return invalid(field, err)
			}
			*n = parsed
		}
	}
	for field, t := range map[string]*time.Time{"start": &o.Start, "end": &o.End} {
		*t = time.Time{}
		if f.Get(field) != "" {
			parsed, err := formTime(f, field)
			if err != nil {
				return cron.Definition{}, err
			}
			*t = parsed
		}
	}
	return def, nil
}

// updatedDefinition is the runtime schedule the form names, with the form's fields.
func updatedDefinition(c *console, r *http.Request, f url.Values) (cron.Definition, error) {
	def, err := ops.Definition(r.Context(), c.pool, f.Get("name"))
	if err != nil {
		return cron.Definition{}, err
	}
	return formDefinition(def, f)
}

// runtimeSchedule is nil if the form names a runtime schedule.
func runtimeSchedule(c *console, r *http.Request, f url.Values) error {
	_, err := ops.Definition(r.Context(), c.pool, f.Get("name"))
	return err
}

// definitionPreview is a create's or update's preview: what a dry run of the form's definition
// (read by read) found, written by write.
func definitionPreview(read definitionReader, write definitionWriter) func(*console, *http.Request, url.Values) (string, error) {
	return func(c *console, r *http.Request, f url.Values) (string, error) {
		def, err := read(c, r, f)
		if err == nil {
			err = write(r.Context(), c.pool, def, &cron.Change{DryRun: true})
		}
		if err != nil {
			return "", err
		}
		zone := "UTC"
		if def.Options != nil && def.Options.Location != nil {
			zone = def.Options.Location.String()
		}
		return fmt.Sprintf("It checks out: %s in %s, run by the instances that handle kind %q.", def.Spec, zone, def.Kind), nil
	}
}

// definitionDo is a create's or update's action: the form's definition (read by read), written
// by write with who and why; done says what was done.
func definitionDo(read definitionReader, write definitionWriter, done string) func(*console, *http.Request, url.Values, string) (string, string, error) {
	return func(c *console, r *http.Request, f url.Values, by string) (string, string, error) {
		def, err := read(c, r, f)
		if err != nil {
			return "", "", err
		}
		if err := write(r.Context(), c.pool, def, &cron.Change{By: by, Note: f.Get("note")}); err != nil {
			return "", "", err
		}
		return fmt.Sprintf("%s %q: %s, kind %s.", done, def.Name, def.Spec, def.Kind), "schedule?name=" + url.QueryEscape(def.Name), nil
	}
}

type (
	definitionReader func(c *console, r *http.Request, f url.Values) (cron.Definition, error)
	definitionWriter func(ctx context.Context, pool *pgxpool.Pool, def cron.Definition, change *cron.Change) error
)

// newDefinition is the new runtime schedule the form describes.
func newDefinition(_ *console, _ *http.Request, f url.Values) (cron.Definition, error) {
	return formDefinition(cron.Definition{Name: f.Get("name")}, f)
}

// scheduleExists is nil if the schedule the form names exists, else an error matching
// [pglock.ErrNotFound].
func scheduleExists(c *console, r *http.Request, f url.Values) error {
	_, _, _, _, err := ops.Schedule(r.Context(), c.pool, f.Get("name"), nil, 1)
	return err
}

// advisoryHolder is the backend the form names, if it holds the advisory lock the form names
// (an error matching [pglock.ErrNotFound] if not).
func advisoryHolder(c *console, r *http.Request, f url.Values) (int32, error) {
	pid, err := strconv.ParseInt(f.Get("pid"), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: pid %q is not a process id", pglock.ErrInvalidArgument, f.Get("pid"))
	}
	key, err := ops.ParseAdvisoryKey(f.Get("key"))
	if err != nil {
		return 0, err
	}
	holders, err := ops.AdvisoryHolders(r.Context(), c.pool, key)
	if err != nil {
		return 0, err
	}
	for _, h := range holders {
		if int64(h.PID) == pid {
			return h.PID, nil
		}
	}
	return 0, fmt.Errorf("%w: backend %d does not hold advisory lock %s: nothing was done", pglock.ErrNotFound, pid, f.Get("key"))
}

// backfillRange reads a backfill's range.
func backfillRange(f url.Values) (from, to time.Time, err error) {
	if from, err = formTime(f, "from"); err != nil {
		return
	}
	to, err = formTime(f, "to")
	return
}

// formTime reads a form's time: RFC 3339, or a form's date and time, in UTC.
func formTime(f url.Values, field string) (time.Time, error) {
	s := f.Get(field)
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %s %q is not a time such as 2026-11-01T00:00 (UTC)", pglock.ErrInvalidArgument, field, s)
}

// confirmData is the confirmation page's.
type confirmData struct {
	Action, Title, Explain, Preview string
	Fields                          []field
	NeedNote                        bool
}

type field struct{ Name, Value string }

// confirm shows what an action will do, and the form that does it.
func (c *console) confirm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("action")
	a, ok := actions[name]
	if !ok {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no such action %q", name))
		return
	}
	if c.opts.ReadOnly(r) {
		c.fail(w, r, http.StatusForbidden, errReadOnly)
		return
	}
	if a.preview != nil && r.Method != http.MethodPost {
		c.fail(w, r, http.StatusMethodNotAllowed, errors.New("its preview runs queries: ask for it with the form, not a link"))
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q := r.Form
	d := confirmData{Action: name, Explain: a.explain, NeedNote: a.needNote}
	var args []any
	for _, f := range a.fields {
		if q.Get(f) == "" && f != "scope" {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: %s is missing", pglock.ErrInvalidArgument, f))
			return
		}
		d.Fields = append(d.Fields, field{f, q.Get(f)})
		args = append(args, q.Get(f))
	}
	for _, f := range a.optional {
		d.Fields = append(d.Fields, field{f, q.Get(f)})
	}
	d.Title = fmt.Sprintf(a.title, args...)
	if a.exists != nil {
		if err := a.exists(c, r, q); err != nil {
			c.failWith(w, r, err)
			return
		}
	}
	if a.preview != nil {
		preview, err := a.preview(c, r, q)
		if err != nil {
			c.failWith(w, r, err)
			return
		}
		d.Preview = preview
	}
	c.render(w, r, http.StatusOK, "confirm", page{Title: d.Title, Data: d})
}

var errReadOnly = errors.New("this console is read-only: no action is taken")

// doAction performs a confirmed action: refused in read-only mode, logged with who did it.
func (c *console) doAction(w http.ResponseWriter, r *http.Request) {
	if c.opts.ReadOnly(r) {
		c.opts.Logger.Warn("pglock console: refused an action in read-only mode", "path", r.URL.Path, "remote", r.RemoteAddr)
		c.fail(w, r, http.StatusForbidden, errReadOnly)
		return
	}
	name := r.PathValue("action")
	a, ok := actions[name]
	if !ok {
		c.fail(w, r, http.StatusNotFound, fmt.Errorf("no such action %q", name))
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f := r.PostForm
	for _, field := range a.fields {
		if f.Get(field) == "" && field != "scope" {
			c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: %s is missing", pglock.ErrInvalidArgument, field))
			return
		}
	}
	if a.needNote && strings.TrimSpace(f.Get("note")) == "" {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%w: a note saying why is required", pglock.ErrInvalidArgument))
		return
	}
	by := c.opts.Operator(r)
	done, next, err := a.do(c, r, f, by)
	logArgs := []any{"action", name, "by", by, "remote", r.RemoteAddr}
	for _, field := range append(a.fields, a.optional...) {
		logArgs = append(logArgs, field, f.Get(field))
	}
	if err != nil {
		c.opts.Logger.Warn("pglock console: action failed", append(logArgs, "error", err)...)
		c.failWith(w, r, err)
		return
	}
	c.opts.Logger.Info("pglock console: action", append(logArgs, "done", done)...)
	if r := []rune(done); len(r) > 300 { // a cookie holds it: a long note must not lose it
		done = string(r[:299]) + "…"
	}
	http.SetCookie(w, &http.Cookie{Name: doneCookie, Value: url.QueryEscape(done), Path: base(r), MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, base(r)+next, http.StatusSeeOther)
}

// failWith answers a failed read or action by what went wrong: 404 for what does not exist, 409
// for what changed meanwhile, 400 for bad input, 500 else. Nothing was written on any refusal.
func (c *console) failWith(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, pglock.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, err)
	case errors.Is(err, pglock.ErrNotHeld), errors.Is(err, pglock.ErrNoLeader), errors.Is(err, pglock.ErrLocked),
		errors.Is(err, pglock.ErrExists), errors.Is(err, pglock.ErrDefinedInCode):
		c.fail(w, r, http.StatusConflict, err)
	case errors.Is(err, pglock.ErrInvalidArgument), errors.Is(err, pglock.ErrInvalidName), errors.Is(err, pglock.ErrInvalidSpec),
		errors.Is(err, pglock.ErrInvalidTTL):
		c.fail(w, r, http.StatusBadRequest, err)
	default:
		c.fail(w, r, http.StatusInternalServerError, err)
	}
}

// doneCookie carries what the last action did to the page it redirects to, once.
const doneCookie = "pglock_console_done"

// takeDone reads and clears the message of the last action.
func takeDone(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(doneCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: doneCookie, Path: base(r), MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	done, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return done
}

// operator is who does an action, by default: the user name of HTTP basic authentication,
// else the client's address.
func operator(r *http.Request) string {
	if user, _, ok := r.BasicAuth(); ok && user != "" {
		return "console:" + user
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "console@" + host
}
