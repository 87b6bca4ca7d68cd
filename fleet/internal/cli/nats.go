package cli

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runfleet/runfleet/fleet/internal/redact"
)

// NATS holds the flags every program connects to NATS with. Each reads RUNFLEET_<NAME> like
// the program's other connection flags.
type NATS struct {
	URL   string // --nats-url
	Creds string // --nats-creds: a credentials file (user JWT and seed), as `nsc` writes it
	NKey  string // --nats-nkey: a file holding a user nkey seed
	TLSCA string // --nats-tls-ca: PEM certificates the server's certificate must chain to
}

// NATSFlags names the flags of [NATS], for ParseEnvOf.
var NATSFlags = []string{"nats-url", "nats-creds", "nats-nkey", "nats-tls-ca"}

// Register adds the flags to fs.
func (n *NATS) Register(fs *flag.FlagSet) {
	fs.StringVar(&n.URL, "nats-url", nats.DefaultURL, "NATS server(s), comma separated")
	fs.StringVar(&n.Creds, "nats-creds", "", "NATS credentials file (user JWT and nkey seed)")
	fs.StringVar(&n.NKey, "nats-nkey", "", "file holding a NATS user nkey seed")
	fs.StringVar(&n.TLSCA, "nats-tls-ca", "", "PEM file of the CA that signed the NATS server's certificate")
}

// Options checks the URLs and the files the flags name and returns the connection options they make. It
// reads every file before any connection is tried, so that a missing or malformed one is its
// own one-line error.
func (n NATS) Options() ([]nats.Option, error) {
	if err := checkURLs(n.URL); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if n.Creds != "" && n.NKey != "" {
		return nil, errors.New("--nats-creds and --nats-nkey: give one of them")
	}
	if n.Creds != "" {
		b, err := os.ReadFile(n.Creds)
		if err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		if !strings.Contains(string(b), "BEGIN NATS USER JWT") || !strings.Contains(string(b), "BEGIN USER NKEY SEED") {
			return nil, fmt.Errorf("--nats-creds %s: not a NATS credentials file (a user JWT and its nkey seed)", n.Creds)
		}
		opts = append(opts, nats.UserCredentials(n.Creds))
	}
	if n.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(n.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", n.NKey, err)
		}
		opts = append(opts, opt)
	}
	if n.TLSCA != "" {
		b, err := os.ReadFile(n.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-ca: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--nats-tls-ca %s: no PEM certificate in it", n.TLSCA)
		}
		opts = append(opts, nats.RootCAs(n.TLSCA))
	}
	return opts, nil
}

// Connect connects a short-lived program (submit) with a bounded dial; extra options (how it
// reconnects and says so) come after the flags'.
func (n NATS) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := n.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(n.URL, append(append(opts, nats.Name(name), nats.Timeout(5*time.Second)), extra...)...)
	if err != nil {
		return nil, connectError(n.URL, err)
	}
	return nc, nil
}

// ConnectNATS connects a long-running program (worker, gateway) to NATS: it reconnects forever
// and logs each loss and return of the connection. It fails at once when no server answers, with
// the one line a program exits with.
func ConnectNATS(n NATS, name string, log *slog.Logger) (*nats.Conn, error) {
	opts, err := n.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(n.URL, append(opts, nats.Name(name), nats.MaxReconnects(-1),
		nats.ReconnectWait(500*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", RedactURL(nc.ConnectedUrl())) }),
		// Without a handler nats.go writes its asynchronous errors (a slow consumer, a permission
		// refused) to stderr as plain text, between the JSON lines of the log.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("nats async error", "subject", sub.Subject, "err", err)
				return
			}
			log.Warn("nats async error", "err", err)
		}))...)
	if err != nil {
		return nil, connectError(n.URL, err)
	}
	return nc, nil
}

// RedactURL is urls (comma separated, as --nats-url takes them) with every user name, password or
// token replaced, so that a log line or an error never shows a credential.
func RedactURL(urls string) string { return redact.URL(urls) }

// checkURLs reads each of urls as nats.go will (a URL without a scheme is nats://), so that one it
// cannot read fails here with an error that quotes no credential, never inside nats.Connect with
// the parser's view of the password. A URL whose '@' the parser does not take as the end of the
// userinfo (a token or password holding '/', '?' or '#') is refused too: nats.go would dial part
// of the credential as the host, and the dial error would name it.
func checkURLs(urls string) error {
	secret := redact.HasSecret(urls)
	for p := range strings.SplitSeq(urls, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		u, err := url.Parse(p)
		switch {
		case err == nil && (!strings.Contains(p, "@") || u.User != nil && !strings.Contains(u.Host+u.Path+u.RawQuery+u.Fragment, "@")):
			continue
		case secret:
			return fmt.Errorf("--nats-url %s does not parse: percent-encode any of / ? # @ : , %% in its user names, passwords and tokens", redact.URL(urls))
		default:
			return fmt.Errorf("--nats-url: %w", err)
		}
	}
	return nil
}

// connectError is a failed connect's error, with no credential of urls in its text.
func connectError(urls string, err error) error {
	if !redact.HasSecret(urls) {
		return fmt.Errorf("nats %s unreachable: %w", urls, err)
	}
	return fmt.Errorf("nats %s unreachable: %s", redact.URL(urls), redact.Text(err.Error(), urls))
}
