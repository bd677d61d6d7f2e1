package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// A console action is a POST from a browser: these checks keep another site's
// page from making the operator's logged-in browser send one.

// maxConsoleForm bounds an action's form.
const maxConsoleForm = 16 << 10

// checkSameOrigin refuses a POST a browser sent from another site (a form
// on a page elsewhere that the operator's logged-in browser submits): the
// browser's Sec-Fetch-Site must say same-origin, an Origin must be this
// host, and the form must carry this process's token, which only the
// console's own pages hold.
func checkSameOrigin(r *http.Request) error {
	if err := checkOrigin(r); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxConsoleForm)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("unreadable form: %v", err)
	}
	if !tokenOK(r.PostForm.Get("csrf")) {
		return errStaleToken
	}
	return nil
}

// checkOrigin is the browser's half of checkSameOrigin: Sec-Fetch-Site
// and Origin.
func checkOrigin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s)", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if o == "null" || err != nil || u.Host != r.Host {
			return errors.New("cross-site request refused (Origin is not this console's host)")
		}
	}
	return nil
}

var errStaleToken = errors.New("the form's token is missing or stale: reload the console's page and try again")

// tokenOK reports whether a form's token is this process's (consoleToken).
func tokenOK(got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(consoleToken)) == 1
}

// consoleToken is this process's anti-forgery token: every console page
// carries it in its forms; another site cannot read it. A restart makes
// open pages' forms stale, which only asks for a reload.
var consoleToken = func() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}()

func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
