package pgqueue

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// RedactMask is what the Redact functions put in place of a password.
const RedactMask = "xxxxx"

// minLiteralPassword is the shortest password RedactText also removes
// wherever its text occurs. Shorter strings turn up by chance in any
// message (a one-letter password is in every word that has that letter), so
// removing them would garble the message and hide nothing.
const minLiteralPassword = 4

// RedactConnString returns connString, a PostgreSQL URL
// (postgres://user:password@host/db?password=...) or a key=value DSN
// (host=h password='p w'), with every password replaced by RedactMask.
// Strings that do not parse are redacted as far as their shape allows:
// whatever may be a password is masked, so print the result, never the
// input.
func RedactConnString(connString string) string {
	return redactPatterns(connString)
}

// RedactText returns text (an error message, a log line, a page) with every
// password removed: passwords in URLs and in password=... pairs wherever
// they stand in text, and, for each of connStrings, its password wherever
// it occurs, raw or percent-encoded, for messages that quote it out of
// context. Pass the connection strings the text may stem from. To redact
// many texts against the same connection strings, use a Redactor.
func RedactText(text string, connStrings ...string) string {
	return NewRedactor(connStrings...).Text(text)
}

// A Redactor removes passwords from texts as RedactText does, for a fixed
// set of connection strings whose passwords it finds once: a writer that
// redacts every line it prints would otherwise parse each connection
// string again for each line, twenty times the cost
// (docs/benchmarks/code.md). The zero value removes the passwords RedactText recognises
// by their place. A Redactor is safe for concurrent use.
type Redactor struct {
	// literals are the passwords' forms, raw and percent-encoded, removed
	// wherever they occur.
	literals []string
}

// NewRedactor returns a Redactor for the passwords of connStrings.
func NewRedactor(connStrings ...string) *Redactor {
	r := &Redactor{}
	for _, cs := range connStrings {
		for _, pw := range passwords(cs) {
			if len(pw) < minLiteralPassword {
				continue
			}
			for _, form := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
				// A password without special characters has one form:
				// each form is searched for in every text.
				if !slices.Contains(r.literals, form) {
					r.literals = append(r.literals, form)
				}
			}
		}
	}
	return r
}

// Text returns text with every password removed (see RedactText).
func (r *Redactor) Text(text string) string {
	text = redactPatterns(text)
	for _, form := range r.literals {
		text = strings.ReplaceAll(text, form, RedactMask)
	}
	return text
}

// RedactError returns err with a message that RedactText has cleaned of the
// passwords of connStrings; errors.Is and errors.As still see err. It
// returns nil for a nil err.
func RedactError(err error, connStrings ...string) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: RedactText(err.Error(), connStrings...), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

var (
	// userinfoPassword matches the password of a URL's userinfo: after the
	// scheme, up to the last '@' before the host's end. The user name may
	// not hold ':' (a URL would percent-encode it), so the password is
	// everything from the first ':' to that '@'.
	userinfoPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s]*):[^\s/?#]*@`)
	// pairPassword matches password and sslpassword settings, as key=value
	// in a DSN (the value quoted or not) or as a URL query parameter.
	pairPassword = regexp.MustCompile(`(?i)((?:^|[\s?&;,])(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&]*)`)
)

// redactPatterns masks the passwords it can recognise by their place.
func redactPatterns(s string) string {
	// Most lines hold no URL; the pattern needs its "://".
	if strings.Contains(s, "://") {
		s = userinfoPassword.ReplaceAllString(s, "${1}:"+RedactMask+"@")
	}
	return pairPassword.ReplaceAllString(s, "${1}"+RedactMask)
}

// passwords returns the passwords connString holds, as written and decoded.
func passwords(connString string) []string {
	var out []string
	if m := userinfoPassword.FindStringSubmatch(connString); m != nil {
		raw := strings.TrimSuffix(m[0][len(m[1])+1:], "@")
		out = append(out, raw)
		if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
			out = append(out, dec)
		}
	}
	for _, m := range pairPassword.FindAllStringSubmatch(connString, -1) {
		v := m[2]
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
			out = append(out, v, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v))
			continue
		}
		out = append(out, v)
		if dec, err := url.QueryUnescape(v); err == nil && dec != v {
			out = append(out, dec)
		}
	}
	return out
}
