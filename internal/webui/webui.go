package webui

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
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

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

// cookieName is the session cookie: HttpOnly, SameSite=Strict, scoped to /ui/.
const cookieName = "runfleet_ui"

// Session is who a login is: the operator (every tenant) or one tenant.
type Session struct {
	Operator bool
	Tenant   string // the tenant a tenant's key is bound to; empty for the operator
}

// Options configure a [UI]. Client, NATS and Authorize are required.
type Options struct {
	Client *runfleet.Client
	NATS   *nats.Conn // worker heartbeats, queue depths, the tenants bucket
	// Authorize says who an API key is; ok false refuses the login. The gateway's keys' rules.
	Authorize func(key string) (s Session, ok bool)
	// Secret signs sessions and CSRF tokens; gateways that share it accept each other's logins.
	Secret []byte
	// Request returns a job's stored request as JSON and the job's tenant; nil shows no request
	// and lets only the operator see a job's page.
	Request func(ctx context.Context, id string) (body json.RawMessage, tenant string, err error)
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
}

// New returns the web view; Close ends its watches.
func New(o Options) (*UI, error) {
	u := &UI{o: o, log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), pages: map[string]*template.Template{},
		hub: newHub(o.Client)}
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
	for _, name := range []string{"login", "overview", "jobs", "job", "tenants", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		u.pages[name] = t
	}
	if err := u.beats.start(o.NATS, o.Client.Subjects().Workers()); err != nil {
		return nil, fmt.Errorf("follow worker heartbeats: %w", err)
	}
	return u, nil
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
	mux.HandleFunc("POST /ui/logout", u.logout)
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

// mac signs parts with the secret.
func (u *UI) mac(parts ...string) string {
	h := hmac.New(sha256.New, u.o.Secret)
	h.Write([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h.Sum(nil))
}

// cookieValue is "<expiry>|<tenant or *>|<nonce>|<mac>": the nonce makes each login's CSRF token
// its own.
func (u *UI) cookieValue(s Session, exp time.Time) string {
	who := "*"
	if !s.Operator {
		who = s.Tenant
	}
	e := strconv.FormatInt(exp.Unix(), 10)
	nonce := rand.Text()
	return e + "|" + who + "|" + nonce + "|" + u.mac("session", e, who, nonce)
}

func (u *UI) parseCookie(v string) (Session, bool) {
	parts := strings.Split(v, "|")
	if len(parts) != 4 || !hmac.Equal([]byte(parts[3]), []byte(u.mac("session", parts[0], parts[1], parts[2]))) {
		return Session{}, false
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return Session{}, false
	}
	if parts[1] == "*" {
		return Session{Operator: true}, true
	}
	return Session{Tenant: parts[1]}, job.ValidTenant(parts[1])
}

// auth lets a request with a valid session through; others go to the login form.
func (u *UI) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(cookieName)
		s, ok := Session{}, false
		if err == nil {
			s, ok = u.parseCookie(c.Value)
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
	if err != nil {
		return ""
	}
	return u.mac("csrf", c.Value)
}

// csrf refuses a state-changing request that is cross-site or lacks the session's token. The
// cookie is SameSite=Strict already; the token also covers browsers that ignore it.
func (u *UI) csrf(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
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

func (u *UI) loginForm(w http.ResponseWriter, r *http.Request) {
	u.render(w, r, http.StatusOK, "login", map[string]any{"Error": ""})
}

func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	s, ok := u.o.Authorize(r.PostFormValue("key"))
	if !ok {
		u.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Error": "That key is not accepted."})
		return
	}
	exp := time.Now().Add(sessionTTL)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: u.cookieValue(s, exp), Path: "/ui/", Expires: exp,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
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
