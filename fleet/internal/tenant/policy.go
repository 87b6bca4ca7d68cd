package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	"github.com/runfleet/runfleet/protocol"
)

// Policy is one tenant's entry in the tenants bucket, defined with its one decoder in package
// protocol, which the client's max_queued check reads too; the alias keeps the fleet's call
// sites short.
type Policy = protocol.TenantPolicy

// HashKey returns the hex SHA-256 of an API key, as a policy lists it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewKey returns a new random API key: 32 random bytes, base64url, behind "rf_".
func NewKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return "rf_" + base64.RawURLEncoding.EncodeToString(b)
}
