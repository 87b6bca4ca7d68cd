package tenant

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Policy is one tenant's entry in the tenants bucket. A zero bound means none.
type Policy struct {
	// MaxQueued bounds the tenant's jobs stored and not yet started, where a job enters through
	// the gateway (and, advisory, the Go client).
	MaxQueued int64 `json:"max_queued,omitempty"`
	// MaxRunning bounds the tenant's jobs that hold a sandbox at once, across the fleet.
	MaxRunning int64 `json:"max_running,omitempty"`
	// Weight is the tenant's share of the fleet, in sandbox CPU time, among the tenants with
	// jobs waiting; zero means 1.
	Weight float64 `json:"weight,omitempty"`
	// APIKeysSHA256 are the hex SHA-256 digests of the gateway keys that act for the tenant.
	APIKeysSHA256 []string `json:"api_keys_sha256,omitempty"`
}

// Bounds on a policy's fields: what a typo could make of the fleet stays sane.
const (
	MaxWeight  = 1000
	maxKeys    = 64
	maxEntry   = 16 << 10
	defaultKey = "default"
)

// ErrInvalidPolicy is the error of a policy that [Decode] or [Policy.Validate] refuses.
var ErrInvalidPolicy = errors.New("invalid tenant policy")

// EffectiveWeight is p's weight, 1 when unset.
func (p Policy) EffectiveWeight() float64 {
	if p.Weight <= 0 {
		return 1
	}
	return p.Weight
}

// Validate reports what is wrong with p, if anything.
func (p Policy) Validate() error {
	switch {
	case p.MaxQueued < 0:
		return fmt.Errorf("%w: max_queued %d is negative", ErrInvalidPolicy, p.MaxQueued)
	case p.MaxRunning < 0:
		return fmt.Errorf("%w: max_running %d is negative", ErrInvalidPolicy, p.MaxRunning)
	case math.IsNaN(p.Weight) || p.Weight < 0 || p.Weight > MaxWeight:
		return fmt.Errorf("%w: weight %v is outside [0, %d]", ErrInvalidPolicy, p.Weight, MaxWeight)
	case len(p.APIKeysSHA256) > maxKeys:
		return fmt.Errorf("%w: %d api keys, at most %d", ErrInvalidPolicy, len(p.APIKeysSHA256), maxKeys)
	}
	for _, k := range p.APIKeysSHA256 {
		if b, err := hex.DecodeString(k); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("%w: api key digest %q is not 64 hex digits", ErrInvalidPolicy, k)
		}
	}
	return nil
}

// Decode reads and validates one bucket entry. Unknown fields are refused, so that a misspelt
// bound is an error and not silently no bound.
func Decode(b []byte) (Policy, error) {
	if len(b) > maxEntry {
		return Policy{}, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidPolicy, len(b), maxEntry)
	}
	var p Policy
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if d.More() {
		return Policy{}, fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidPolicy)
	}
	return p, p.Validate()
}

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
