package gateway_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/fleet/internal/tenant"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
	"github.com/runfleet/runfleet/protocol"
)

// sessionCookie is the value of the session cookie c holds for the gateway at base.
func sessionCookie(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	u, _ := url.Parse(base)
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "runfleet_ui" {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// withCookie GETs u with only the session cookie v, as an attacker holding a copy sends it.
func withCookie(t *testing.T, u, v string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", u, nil)
	req.AddCookie(&http.Cookie{Name: "runfleet_ui", Value: v})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// oldMAC is the session MAC of the former scheme, whose secret was SHA-256 of a fixed string and
// the operator's key: what an attacker computes for each guess of the key.
func oldMAC(guess string, parts ...string) string {
	secret := sha256.Sum256([]byte("runfleet web view\x00" + guess))
	h := hmac.New(sha256.New, secret[:])
	h.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h.Sum(nil))
}

// TestSessionAttacks runs the attacks of issue 37 on web sessions through a gateway against the
// real tenants bucket, and each fails: a tenant's own cookie tells nothing of the operator's key
// and a cookie minted from the key is refused; a logged-out cookie, one of a removed key and one
// of a deleted tenant are refused (within 5 s, the bucket's contract); a login posted by a
// foreign page is refused.
func TestSessionAttacks(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	base := f.srv.URL + "/ui/"
	keyA := f.addKey("acme", tenant.Policy{})

	t.Run("offline guess of the operator's key", func(t *testing.T) {
		c := f.browser()
		if resp := login(t, c, base, keyA); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("tenant login = %d", resp.StatusCode)
		}
		own := sessionCookie(t, c, base)
		parts := strings.Split(own, "|")
		for _, guess := range []string{"opkey", "password", "operator", "runfleet", "0123456789", apiKey} {
			if mac := oldMAC(guess, append([]string{"session"}, parts[:len(parts)-1]...)...); mac == parts[len(parts)-1] {
				t.Errorf("the tenant's cookie is signed with a secret derived from guess %q", guess)
			}
		}
		// Cookies minted with the secret the operator's key used to give: the old format and the
		// new one, for the operator ("*").
		exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		old := exp + "|*|nonce|" + oldMAC(apiKey, "session", exp, "*", "nonce")
		now := strconv.FormatInt(time.Now().UnixNano(), 10)
		keyID := oldMAC(apiKey, "key", hex.EncodeToString(func() []byte { s := sha256.Sum256([]byte(apiKey)); return s[:] }()))[:32]
		minted := "v2|*|" + keyID + "|" + now + "|sid|" + oldMAC(apiKey, "session", "v2", "*", keyID, now, "sid")
		for _, v := range []string{old, minted} {
			if code := withCookie(t, base+"tenants", v); code != http.StatusSeeOther {
				t.Errorf("GET /ui/tenants with a cookie minted from the operator's key = %d, want 303 to the login form", code)
			}
		}
		if code := withCookie(t, base+"tenants", own); code != http.StatusOK {
			t.Errorf("GET /ui/tenants with the tenant's own cookie = %d, want 200", code)
		}
	})

	t.Run("logout revokes the cookie", func(t *testing.T) {
		c := f.browser()
		login(t, c, base, apiKey)
		stolen := sessionCookie(t, c, base)
		if code := withCookie(t, base, stolen); code != http.StatusOK {
			t.Fatalf("GET /ui/ with the session = %d, want 200", code)
		}
		_, page := get(t, c, base)
		m := csrfField.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the page has no logout token:\n%s", page)
		}
		if resp := postForm(t, c, base+"logout", url.Values{"csrf": {m[1]}}); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("logout = %d, want 303", resp.StatusCode)
		}
		if code := withCookie(t, base, stolen); code != http.StatusSeeOther {
			t.Errorf("GET /ui/ with the cookie after logout = %d, want 303 to the login form", code)
		}
		// Another gateway on the same fleet refuses it too: the logout is in the bucket.
		other := f.startBinary()
		testenv.WaitFor(t, 5*time.Second, "the other gateway refuses the logged-out cookie", func() bool {
			return withCookie(t, other.URL+"/ui/", stolen) == http.StatusSeeOther
		})
		// A new login works at once.
		if resp := login(t, c, base, apiKey); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("login after logout = %d", resp.StatusCode)
		}
		if code, _ := get(t, c, base); code != http.StatusOK {
			t.Errorf("GET /ui/ after a new login = %d, want 200", code)
		}
	})

	t.Run("removed key", func(t *testing.T) {
		key := f.addKey("removed", tenant.Policy{})
		keep := f.addKey("removed", tenant.Policy{})
		c := f.browser()
		login(t, c, base, key)
		stolen := sessionCookie(t, c, base)
		if code := withCookie(t, base, stolen); code != http.StatusOK {
			t.Fatalf("GET /ui/ with the session = %d, want 200", code)
		}
		if _, err := tenant.Update(t.Context(), f.kv, "removed", func(p *tenant.Policy) {
			p.APIKeysSHA256 = []string{tenant.HashKey(keep)}
		}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 5*time.Second, "the removed key's session refused", func() bool {
			return withCookie(t, base, stolen) == http.StatusSeeOther
		})
	})

	t.Run("deleted tenant", func(t *testing.T) {
		key := f.addKey("deleted", tenant.Policy{})
		c := f.browser()
		login(t, c, base, key)
		stolen := sessionCookie(t, c, base)
		if err := tenant.Delete(t.Context(), f.kv, "deleted"); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 5*time.Second, "the deleted tenant's session refused", func() bool {
			return withCookie(t, base, stolen) == http.StatusSeeOther
		})
	})

	t.Run("login from a foreign page", func(t *testing.T) {
		// The attacker's own login form token, posted from its page in the victim's browser,
		// which holds no login cookie of the attacker's.
		attacker := f.browser()
		_, form := get(t, attacker, base+"login")
		token := csrfField.FindStringSubmatch(form)[1]
		cases := []struct {
			name string
			hdr  []string
			form url.Values
		}{
			{"cross-site", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, url.Values{"key": {keyA}, "csrf": {token}}},
			{"no browser headers, token of another browser", nil, url.Values{"key": {keyA}, "csrf": {token}}},
			{"no token", nil, url.Values{"key": {keyA}}},
		}
		for _, c := range cases {
			victim := f.browser()
			get(t, victim, base+"login") // the victim has a login cookie of its own
			req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"login", strings.NewReader(c.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			resp, err := victim.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: login = %d, want 403", c.name, resp.StatusCode)
			}
			if code, _ := get(t, victim, base); code != http.StatusSeeOther {
				t.Errorf("%s: the victim's browser is logged in (GET /ui/ = %d)", c.name, code)
			}
		}
	})

	// The secret is the bucket's, random, and rotating it ends every session.
	e, err := f.kv.Get(t.Context(), protocol.SessionSecretKey)
	if err != nil || len(e.Value()) != 32 {
		t.Fatalf("session secret in the bucket: %v, want 32 bytes", err)
	}
	c := f.browser()
	login(t, c, base, apiKey)
	if code, _ := get(t, c, base); code != http.StatusOK {
		t.Fatalf("GET /ui/ = %d", code)
	}
	if err := tenant.RotateSessionSecret(t.Context(), f.kv); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "sessions end with the rotated secret", func() bool {
		code, _ := get(t, c, base)
		return code == http.StatusSeeOther
	})
}

// TestPublicURL: behind a TLS proxy (--public-url https://…) the cookies are Secure and a form is
// accepted from the public origin only.
func TestPublicURL(t *testing.T) {
	f := newFleet(t, gateway.Options{})
	p := f.startBinary("--public-url", "https://gw.example")
	// Without a jar, which would not send a Secure cookie over plain HTTP.
	resp, err := http.Get(p.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var pre *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "runfleet_ui_login" {
			pre = c
		}
	}
	if pre == nil || !pre.Secure || !pre.HttpOnly || pre.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v, want Secure, HttpOnly, SameSite=Strict", pre)
	}
	m := csrfField.FindStringSubmatch(string(form))
	if m == nil {
		t.Fatalf("login form has no token:\n%s", form)
	}
	post := func(origin string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/ui/login",
			strings.NewReader(url.Values{"key": {apiKey}, "csrf": {m[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.AddCookie(&http.Cookie{Name: pre.Name, Value: pre.Value})
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(p.URL); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login posted from the listening origin, not the public one = %d, want 403", resp.StatusCode)
	}
	resp = post("https://gw.example")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login from the public origin = %d, want 303", resp.StatusCode)
	}
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "runfleet_ui" {
			session = c
		}
	}
	if session == nil || !session.Secure || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v, want Secure, HttpOnly, SameSite=Strict", session)
	}
}
