package pgqueue_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

func TestRedactConnString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://app:s3cret@db:5432/app?sslmode=require", "postgres://app:xxxxx@db:5432/app?sslmode=require"},
		{"postgresql://app:p%40ss%2Fw@db/app", "postgresql://app:xxxxx@db/app"},
		{"postgres://app:p@ss@db/app", "postgres://app:xxxxx@db/app"},
		{"postgres://db:5432/app?user=app&password=s3cret&sslmode=disable", "postgres://db:5432/app?user=app&password=xxxxx&sslmode=disable"},
		{"postgres://app@db/app?sslpassword=keypass", "postgres://app@db/app?sslpassword=xxxxx"},
		{"host=db user=app password=s3cret dbname=app", "host=db user=app password=xxxxx dbname=app"},
		{"host=db password = 'it\\'s a secret' dbname=app", "host=db password = xxxxx dbname=app"},
		{"postgres://app:s3cret@db:notaport/app", "postgres://app:xxxxx@db:notaport/app"},
		{"postgres://db:5432/app", "postgres://db:5432/app"},
		{"host=db user=app", "host=db user=app"},
	}
	for _, tt := range tests {
		if got := pgqueue.RedactConnString(tt.in); got != tt.want {
			t.Errorf("RedactConnString(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRedactText(t *testing.T) {
	const cs = "postgres://app:p%40ss-w0rd@db/app"
	msg := "dial db: auth p@ss-w0rd refused (from p%40ss-w0rd, url postgres://app:p%40ss-w0rd@db/app)"
	want := "dial db: auth xxxxx refused (from xxxxx, url postgres://app:xxxxx@db/app)"
	if got := pgqueue.RedactText(msg, cs); got != want {
		t.Errorf("RedactText = %q, want %q", got, want)
	}
	// A short password is removed where it stands as a password, not
	// wherever its letters occur.
	if got := pgqueue.RedactText("user=a password=abc failed: abc", "password=abc"); got != "user=a password=xxxxx failed: abc" {
		t.Errorf("RedactText with a short password = %q", got)
	}
	// A Redactor finds the passwords once and removes them from every
	// text; its zero value still removes passwords by their place.
	r := pgqueue.NewRedactor(cs)
	for range 2 {
		if got := r.Text(msg); got != want {
			t.Errorf("Redactor.Text = %q, want %q", got, want)
		}
	}
	var zero pgqueue.Redactor
	if got := zero.Text("url postgres://app:s3cret@db/app, password=s3cret and s3cret"); got != "url postgres://app:xxxxx@db/app, password=xxxxx and s3cret" {
		t.Errorf("zero Redactor.Text = %q", got)
	}
	base := errors.New("connect postgres://app:p%40ss-w0rd@db/app: refused")
	err := pgqueue.RedactError(base, cs)
	if !errors.Is(err, base) || err.Error() != "connect postgres://app:xxxxx@db/app: refused" {
		t.Errorf("RedactError = %q (is base: %v)", err, errors.Is(err, base))
	}
	if pgqueue.RedactError(nil, cs) != nil {
		t.Error("RedactError(nil) is not nil")
	}
}

// FuzzRedactText: whatever the password, neither it nor its encodings
// survive in a text that quotes the connection string or the password.
func FuzzRedactText(f *testing.F) {
	f.Add("s3cret-pw", "failed: %s")
	f.Add("p@ss/w:rd?#", "url %s, again %s")
	f.Add("it's", "%s")
	f.Add("spaces in it", "password=%s")
	f.Fuzz(func(t *testing.T, password, format string) {
		// The mask is made of x's, so a password with one could be formed
		// by a mask and its neighbours; short ones are masked only in place.
		if len(password) < 4 || strings.ContainsRune(password, 'x') || strings.Count(format, "%s") == 0 {
			t.Skip()
		}
		u := url.URL{Scheme: "postgres", User: url.UserPassword("app", password), Host: "db:5432", Path: "/app"}
		for _, cs := range []string{u.String(), "host=db password='" + strings.ReplaceAll(strings.ReplaceAll(password, `\`, `\\`), "'", `\'`) + "'"} {
			for _, quoted := range []string{cs, password} {
				text := strings.ReplaceAll(format, "%s", quoted)
				got := pgqueue.RedactText(text, cs)
				for _, secret := range []string{password, url.QueryEscape(password), url.PathEscape(password)} {
					if len(secret) >= 4 && strings.Contains(got, secret) {
						t.Fatalf("RedactText(%q, %q) = %q still holds %q", text, cs, got, secret)
					}
				}
				if got := pgqueue.RedactConnString(cs); strings.Contains(got, password) {
					t.Fatalf("RedactConnString(%q) = %q holds the password", cs, got)
				}
			}
		}
	})
}
