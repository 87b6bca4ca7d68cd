package webui

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet"
	"github.com/runfleet/runfleet/job"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// partialFS holds templates that several pages use: the charts, a job's timeline and source.
//
//go:embed partials/*.html
var partialFS embed.FS

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

// cookieName is the session cookie: HttpOnly, SameSite=Strict, scoped to /ui/.
const cookieName = "runfleet_ui"

// loginCookie is the pre-session cookie the login form's token is bound to.
const loginCookie = "runfleet_ui_login"

// Session is who a login is: the operator (every tenant) or one tenant, and by which key.
type Session struct {
	Operator bool
	Tenant   string // the tenant a tenant's key is bound to; empty for the operator
	// KeyDigest is the hex SHA-256 of the key that logged in, set by Authorize; the cookie
	// carries only an HMAC of it under the secret, so that it tells nothing of the key.
	KeyDigest string
}

// Options configure a [UI]. Client, Inspector, NATS, Authorize, Secret, Keys and EndSessions are
// required.
type Options struct {
	Client    *runfleet.Client
	Inspector *runfleet.Inspector // the overview's counts
	NATS      *nats.Conn          // worker heartbeats, queue depths, the tenants bucket
	// Authorize says who an API key is; ok false refuses the login. The gateway's keys' rules.
	Authorize func(key string) (s Session, ok bool)
	// Secret returns the current secret that signs sessions and form tokens (random, kept in the
	// tenants bucket, so that gateways share it); nil refuses every session.
	Secret func() []byte
	// Keys returns what a session of s's identity is checked against on every request: the
	// digests of the keys that act for it now (none for a tenant without an entry) and when its
	// sessions were last ended (a logout; a session issued until then is void).
	Keys func(s Session) (digests []string, notBefore time.Time)
	// EndSessions voids s's identity's sessions issued until at, on every gateway (a logout).
	EndSessions func(ctx context.Context, s Session, at time.Time) error
	// PublicURL is the view's address as browsers see it (behind a proxy); nil: the request's.
	// An https one makes the cookies Secure; its origin is the only one a form may come from.
	PublicURL *url.URL
	// Request returns tenant's job's stored request (its JSON, and its header, whose traceparent
	// names the job's trace); nil shows no request and lets only the operator see a job's page.
	Request func(ctx context.Context, tenant, id string) (runfleet.StoredRequest, error)
	// TraceURL is a trace viewer's page of a trace, TraceIDPlaceholder where the trace id goes
	// (`http://jaeger:16686/trace/{trace_id}`): a job's page links its trace there. Empty shows
	// the trace id as text; [CheckTraceURL] says what New accepts.
	TraceURL string
	// Artifact serves GET .../jobs/{id}/artifacts/{path...} (the gateway's own handler).
	Artifact http.Handler
	// Loads returns each tenant's jobs now (the gateway's shared snapshot of the tenant
	// consumers); nil shows no load.
	Loads  func(ctx context.Context) (map[string]Load, error)
	Logger *slog.Logger
}

// Load is a tenant's jobs now, over its queues: waiting to start, and running (claimed).
type Load struct {
	Queued  uint64
	Running int
}

// UI is the web view: server-rendered pages under /ui/, live through server-sent events.
type UI struct {
	o     Options
	log   *slog.Logger
	pages map[string]*template.Template
	hub   *hub
	beats beats
	snap  snapshotCache
	chart chartCache
}

// New returns the web view; Close ends its watches.
func New(o Options) (*UI, error) {
	if o.TraceURL != "" {
		if err := CheckTraceURL(o.TraceURL); err != nil {
			return nil, fmt.Errorf("trace URL %w", err)
		}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	u := &UI{o: o, log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), pages: pages,
		hub: newHub(tenantWatcher{o.Inspector})}
	if err := u.beats.start(o.NATS, o.Client.Subjects()); err != nil {
		return nil, fmt.Errorf("follow worker heartbeats: %w", err)
	}
	return u, nil
}

// parsePages parses each page with the layout and the partials.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"since": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
		"clock": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"deref": func(p *int64) string {
			if p == nil {
				return "–"
			}
			return strconv.FormatInt(*p, 10)
		},
		"exit": func(p *int) string {
			if p == nil {
				return "–"
			}
			return strconv.Itoa(*p)
		},
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "overview", "jobs", "job", "tenants", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err == nil {
			t, err = t.ParseFS(partialFS, "partials/*.html")
		}
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// Close ends the watches of open job pages and the heartbeat subscription, and waits for them.
func (u *UI) Close() {
	u.hub.close()
	u.beats.stop()
}

// Handler serves /ui/.
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", u.loginForm)
	mux.HandleFunc("POST /ui/login", u.login)
	mux.HandleFunc("POST /ui/logout", u.auth(u.csrf(u.logout)))
	mux.HandleFunc("GET /ui/{$}", u.auth(u.overview))
	mux.HandleFunc("GET /ui/live/overview", u.auth(u.overviewLive))
	mux.HandleFunc("GET /ui/jobs", u.auth(u.jobs))
	mux.HandleFunc("GET /ui/jobs/{id}", u.auth(u.job))
	mux.HandleFunc("GET /ui/jobs/{id}/live", u.auth(u.jobLive))
	mux.HandleFunc("POST /ui/jobs/{id}/cancel", u.auth(u.csrf(u.cancel)))
	mux.HandleFunc("POST /ui/jobs/{id}/redrive", u.auth(u.csrf(u.redrive)))
	mux.HandleFunc("GET /ui/jobs/{id}/artifacts/{path...}", u.auth(u.artifact))
	mux.HandleFunc("GET /ui/tenants", u.auth(u.tenants))
	return securityHeaders(mux)
}

// securityHeaders keeps the pages out of frames and scripts to the view's own.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// sessionKey is the context key of a request's session.
type sessionKey struct{}

func sessionOf(r *http.Request) Session { return r.Context().Value(sessionKey{}).(Session) }

// mac signs parts with secret.
func mac(secret []byte, parts ...string) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h.Sum(nil))
}

// secret is the current signing secret; nil when none was read yet.
func (u *UI) secret() []byte {
	if u.o.Secret == nil {
		return nil
	}
	return u.o.Secret()
}

// keyID names a key in a cookie without telling anything of it to one who lacks the secret.
func keyID(secret []byte, digest string) string { return mac(secret, "key", digest)[:32] }

// who is a session's identity in its cookie: "*" for the operator.
func (s Session) who() string {
	if s.Operator {
		return "*"
	}
	return s.Tenant
}

// cookieValue is "v2|<tenant or *>|<key id>|<issued, Unix ns>|<session id>|<mac>". The session id
// makes each login's form token its own.
func cookieValue(secret []byte, s Session, issued time.Time) string {
	parts := []string{"v2", s.who(), keyID(secret, s.KeyDigest), strconv.FormatInt(issued.UnixNano(), 10), rand.Text()}
	return strings.Join(parts, "|") + "|" + mac(secret, append([]string{"session"}, parts...)...)
}

// session checks cookie value v as every request does: signed with the current secret, not
// older than sessionTTL, issued after its identity's sessions were last ended, and its key still
// one that acts for its identity (the operator's key, or one of its tenant's while the tenant has
// an entry).
func (u *UI) session(v string) (Session, bool) {
	secret := u.secret()
	parts := strings.Split(v, "|")
	if len(secret) == 0 || len(parts) != 6 || parts[0] != "v2" ||
		!hmac.Equal([]byte(parts[5]), []byte(mac(secret, append([]string{"session"}, parts[:5]...)...))) {
		return Session{}, false
	}
	ns, err := strconv.ParseInt(parts[3], 10, 64)
	issued := time.Unix(0, ns)
	if err != nil || time.Since(issued) > sessionTTL || time.Until(issued) > time.Minute {
		return Session{}, false
	}
	s := Session{Operator: parts[1] == "*", Tenant: parts[1]}
	if s.Operator {
		s.Tenant = ""
	} else if !job.ValidTenant(s.Tenant) {
		return Session{}, false
	}
	digests, notBefore := u.o.Keys(s)
	if !issued.After(notBefore) {
		return Session{}, false
	}
	for _, d := range digests {
		if hmac.Equal([]byte(keyID(secret, d)), []byte(parts[2])) {
			s.KeyDigest = d
			return s, true
		}
	}
	return Session{}, false
}

// auth lets a request with a valid session through; others go to the login form.
func (u *UI) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(cookieName)
		s, ok := Session{}, false
		if err == nil {
			s, ok = u.session(c.Value)
		}
		if !ok {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	}
}

// csrfToken binds a form to the session cookie it was rendered for.
func (u *UI) csrfToken(r *http.Request) string {
	c, err := r.Cookie(cookieName)
	secret := u.secret()
	if err != nil || len(secret) == 0 {
		return ""
	}
	return mac(secret, "csrf", c.Value)
}

// sameOrigin reports whether a form post comes from the view's own pages, as far as the browser
// says: Sec-Fetch-Site same-origin when sent, and an Origin, when sent, that is the view's.
func (u *UI) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true // not a browser, or one that sends none: the token still binds the form
	}
	o, err := url.Parse(origin)
	if err != nil || o.Host == "" {
		return false // "null" included: an opaque origin is never the view's
	}
	if p := u.o.PublicURL; p != nil {
		return o.Scheme == p.Scheme && strings.EqualFold(o.Host, p.Host)
	}
	return strings.EqualFold(o.Host, r.Host)
}

// secure says whether cookies must be Secure: served over TLS, here or at the public address.
func (u *UI) secure(r *http.Request) bool {
	return r.TLS != nil || u.o.PublicURL != nil && u.o.PublicURL.Scheme == "https"
}

// csrf refuses a state-changing request that is cross-site or lacks the session's token. The
// cookie is SameSite=Strict already; the checks also cover browsers that ignore it.
func (u *UI) csrf(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !u.sameOrigin(r) {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		want := u.csrfToken(r)
		if want == "" || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(want)) {
			http.Error(w, "stale or missing form token: reload the page", http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

// loginToken is the login form's token, bound to the browser's pre-session cookie; it sets that
// cookie when the request has none.
func (u *UI) loginToken(w http.ResponseWriter, r *http.Request) string {
	secret := u.secret()
	if len(secret) == 0 {
		return ""
	}
	c, err := r.Cookie(loginCookie)
	v := ""
	if err == nil && len(c.Value) >= 16 {
		v = c.Value
	} else {
		v = rand.Text()
		http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: v, Path: "/ui/", MaxAge: int(sessionTTL / time.Second),
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	}
	return mac(secret, "login", v)
}

func (u *UI) loginForm(w http.ResponseWriter, r *http.Request) {
	u.render(w, r, http.StatusOK, "login", map[string]any{"Error": "", "CSRF": u.loginToken(w, r)})
}

// login opens a session for a key, from the view's own login form only: a foreign page must not
// log a browser in as someone else (login CSRF).
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	secret := u.secret()
	if len(secret) == 0 {
		http.Error(w, "the session secret is not read yet; retry", http.StatusServiceUnavailable)
		return
	}
	c, err := r.Cookie(loginCookie)
	if !u.sameOrigin(r) || err != nil || !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(mac(secret, "login", c.Value))) {
		u.render(w, r, http.StatusForbidden, "login", map[string]any{"Error": "Stale or foreign login form: log in again here.", "CSRF": u.loginToken(w, r)})
		return
	}
	s, ok := u.o.Authorize(r.PostFormValue("key"))
	if !ok {
		u.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Error": "That key is not accepted.", "CSRF": u.loginToken(w, r)})
		return
	}
	now := time.Now()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: cookieValue(secret, s, now), Path: "/ui/", Expires: now.Add(sessionTTL),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// logout ends the session on every gateway, not only in this browser: it voids every session of
// its identity issued until now, as a stolen copy of the cookie would otherwise outlive it.
func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	if err := u.o.EndSessions(ctx, sessionOf(r), time.Now()); err != nil {
		u.log.Warn("log out", "err", err)
		u.fail(w, r, http.StatusServiceUnavailable, "Could not end the session; try again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: u.secure(r)})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// render executes page with data, adding the session and the CSRF token.
func (u *UI) render(w http.ResponseWriter, r *http.Request, code int, page string, data map[string]any) {
	if s, ok := r.Context().Value(sessionKey{}).(Session); ok {
		data["Session"] = s
		data["CSRF"] = u.csrfToken(r)
	}
	data["Page"] = page
	var b strings.Builder
	if err := u.pages[page].Execute(&b, data); err != nil {
		u.log.Error("render", "page", page, "err", err)
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(b.String()))
}

func (u *UI) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	u.render(w, r, code, "error", map[string]any{"Error": msg})
}

// snapshotCache holds the overview for a moment, so that any number of open overviews costs
// the fleet one read of it per period.
type snapshotCache struct {
	mu   sync.Mutex
	at   time.Time
	data map[string]any
}
