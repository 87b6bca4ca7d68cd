package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

// serve starts an embedded nats-server configured by o and returns its URL.
func serve(t *testing.T, o server.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	srv, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready in 10s")
	}
	return srv.ClientURL()
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsFiles makes a CA and a server certificate for 127.0.0.1 signed by it; it returns the
// server's TLS configuration and the CA's PEM.
func tlsFiles(t *testing.T) (*tls.Config, []byte) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runfleet test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: srvKey}},
		MinVersion: tls.VersionTLS12}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func seed(t *testing.T, kp nkeys.KeyPair) []byte {
	t.Helper()
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func public(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConnectWithCredentials: each credential flag reaches a nats-server that requires it, and the
// same server refuses a connection without it. Both ways of connecting are tried: the
// long-running programs' ConnectNATS and submit's Connect.
func TestConnectWithCredentials(t *testing.T) {
	tlsConfig, caPEM := tlsFiles(t)
	tlsURL := serve(t, server.Options{TLS: true, TLSConfig: tlsConfig, TLSTimeout: 2})

	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	nkeyURL := serve(t, server.Options{Nkeys: []*server.NkeyUser{{Nkey: public(t, user)}}})

	operator, _ := nkeys.CreateOperator()
	account, _ := nkeys.CreateAccount()
	credsUser, _ := nkeys.CreateUser()
	opJWT, err := jwt.NewOperatorClaims(public(t, operator)).Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	accJWT, err := jwt.NewAccountClaims(public(t, account)).Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(public(t, account), accJWT); err != nil {
		t.Fatal(err)
	}
	userJWT, err := jwt.NewUserClaims(public(t, credsUser)).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed(t, credsUser))
	if err != nil {
		t.Fatal(err)
	}
	credsURL := serve(t, server.Options{TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver})

	cases := []struct {
		name   string
		with   cli.NATS
		refuse string // what the server says without the credential
	}{
		{"TLS with a private CA", cli.NATS{URL: tlsURL, TLSCA: writeFile(t, "ca.pem", caPEM)}, "certificate"},
		{"nkey seed", cli.NATS{URL: nkeyURL, NKey: writeFile(t, "user.nk", seed(t, user))}, "Authorization"},
		{"credentials file", cli.NATS{URL: credsURL, Creds: writeFile(t, "user.creds", creds)}, "Authorization"},
	}
	log := slog.New(slog.DiscardHandler)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nc, err := cli.ConnectNATS(c.with, "test", log)
			if err != nil {
				t.Fatalf("ConnectNATS(%+v) error = %v", c.with, err)
			}
			nc.Close()
			nc, err = c.with.Connect("test")
			if err != nil {
				t.Fatalf("Connect(%+v) error = %v", c.with, err)
			}
			nc.Close()
			if nc, err := (cli.NATS{URL: c.with.URL}).Connect("test"); err == nil || !strings.Contains(err.Error(), c.refuse) {
				if nc != nil {
					nc.Close()
				}
				t.Errorf("Connect without the credential: error = %v, want one saying %q", err, c.refuse)
			}
		})
	}
}

// TestCredentialFilesCheckedFirst: a missing or malformed file is one error naming its flag.
func TestCredentialFilesCheckedFirst(t *testing.T) {
	garbage := writeFile(t, "garbage", []byte("not a key\n"))
	for _, c := range []struct {
		name string
		n    cli.NATS
		want string
	}{
		{"creds missing", cli.NATS{Creds: "/nonexistent/user.creds"}, "--nats-creds"},
		{"creds malformed", cli.NATS{Creds: garbage}, "--nats-creds"},
		{"nkey missing", cli.NATS{NKey: "/nonexistent/user.nk"}, "--nats-nkey"},
		{"nkey malformed", cli.NATS{NKey: garbage}, "--nats-nkey"},
		{"CA missing", cli.NATS{TLSCA: "/nonexistent/ca.pem"}, "--nats-tls-ca"},
		{"CA malformed", cli.NATS{TLSCA: garbage}, "--nats-tls-ca"},
		{"creds and nkey", cli.NATS{Creds: garbage, NKey: garbage}, "give one of them"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.n.Options()
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Options() error = %v, want one line naming %s", err, c.want)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:pw@h1:4222,nats://tok3n@h2:4222", "nats://REDACTED@h1:4222,nats://REDACTED@h2:4222"},
		{"redis://:pw@127.0.0.1:6379/0", "redis://REDACTED@127.0.0.1:6379/0"},
		{"nats://us er:p%zz@h", "nats://REDACTED@h"},
	} {
		if got := cli.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestAsyncErrorsLogged: nats.go's asynchronous errors go to the JSON log, never to stderr as
// plain text.
func TestAsyncErrorsLogged(t *testing.T) {
	url := serve(t, server.Options{})
	var buf testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	nc, err := cli.ConnectNATS(cli.NATS{URL: url}, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	release := make(chan struct{})
	sub, err := nc.Subscribe("slow", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	if err := sub.SetPendingLimits(1, 1<<20); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		nc.Publish("slow", []byte("x"))
	}
	nc.Flush()
	testenv.WaitFor(t, 10*time.Second, "a slow consumer in the JSON log", func() bool {
		return strings.Contains(buf.String(), `"msg":"nats async error","subject":"slow","err":"nats: slow consumer`)
	})
}
