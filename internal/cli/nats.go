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

// Options checks the files the flags name and returns the connection options they make. It
// reads every file before any connection is tried, so that a missing or malformed one is its
// own one-line error.
func (n NATS) Options() ([]nats.Option, error) {
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
		return nil, fmt.Errorf("nats %s unreachable: %w", RedactURL(n.URL), err)
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
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected", "url", RedactURL(nc.ConnectedUrl())) }))...)
	if err != nil {
		return nil, fmt.Errorf("nats %s unreachable: %w", RedactURL(n.URL), err)
	}
	return nc, nil
}

// RedactURL is urls (comma separated, as --nats-url takes them) with every user name, password or
// token replaced, so that a log line or an error never shows a credential.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil && strings.Contains(p, "@"):
			parts[i] = "REDACTED" // unparsable, and may hold a credential
		case err == nil && u.User != nil:
			u.User = url.User("REDACTED")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
