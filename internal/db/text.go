package db

import "strings"

// MaxErrorLen is the most bytes of an error message that pglock records with a job attempt or a
// cron run.
const MaxErrorLen = 4096

// ErrorText is err's message as a text column can keep it: valid UTF-8 ("?" for invalid
// bytes), "?" for NUL, and at most MaxErrorLen bytes, never cutting a character in two.
func ErrorText(err error) string {
	msg := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "?"), "\x00", "?")
	if len(msg) > MaxErrorLen {
		msg = strings.ToValidUTF8(msg[:MaxErrorLen], "")
	}
	return msg
}
