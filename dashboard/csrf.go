package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
)

// csrfCookie holds the browser's random nonce; csrfField is the form field
// that carries the token signed from it.
const (
	csrfCookie = "jobfence_csrf"
	csrfField  = "csrf"
)

// ErrCSRF reports an action whose form carried no valid CSRF token: it
// did not come from a page of this dashboard.
var ErrCSRF = errors.New("dashboard: refused: the form's CSRF token is missing or wrong; reload the page and try again")

// csrf issues and checks the forms' tokens. Each browser gets a random
// nonce in a cookie; a form carries HMAC(key, nonce). A page of another
// site can neither read the cookie nor, without the key, compute the token
// (not even one that planted a cookie of its own through a sibling
// subdomain), so a forged POST fails.
type csrf struct {
	key  []byte
	path string // the cookie's Path: the dashboard's base
}

// token returns the token for the request's nonce, setting a new nonce
// cookie when the request has none.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(csrfCookie)
	nonce := ""
	if err == nil && ck.Value != "" {
		nonce = ck.Value
	} else {
		nonce = rand.Text()
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie, Value: nonce, Path: c.path,
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
		})
	}
	return c.sign(nonce)
}

func (c csrf) sign(nonce string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check returns ErrCSRF unless the request's form carries the token of its
// nonce cookie. The comparison takes the same time whatever the token.
func (c csrf) check(r *http.Request) error {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return ErrCSRF
	}
	given := r.PostFormValue(csrfField)
	if !hmac.Equal([]byte(given), []byte(c.sign(ck.Value))) {
		return ErrCSRF
	}
	return nil
}
