package main

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"
)

var (
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*):[^@\s]*@`)
	kvPassword  = regexp.MustCompile(`(password\s*=\s*)('[^']*'|\S+)`)
)

// redacted is err's message with any password in it replaced.
func redacted(err error) string {
	s := urlPassword.ReplaceAllString(err.Error(), "$1:xxxxx@")
	return kvPassword.ReplaceAllString(s, "${1}xxxxx")
}

// timestamp shows t in RFC 3339 with how far it is from now, both by the database's clock:
// "2026-11-22T04:05:06Z (in 12s)".
func timestamp(t, now time.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + relative(t.Sub(now)) + ")"
}

// relative says "in 12s", "3m ago", "now".
func relative(d time.Duration) string {
	switch {
	case d >= time.Second:
		return "in " + span(d)
	case d <= -time.Second:
		return span(-d) + " ago"
	}
	return "now"
}

// span writes d in its largest whole unit: 12s, 3m, 5h, 2d.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// table writes rows under a header in aligned columns.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
