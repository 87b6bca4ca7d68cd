package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/sandbox"
	"github.com/runfleet/runfleet/job"
)

// ErrLeaseLost ends a collection whose attempt no longer holds the job.
var ErrLeaseLost = errors.New("lease lost")

// Store is the part of a JetStream object store this package uses.
type Store interface {
	Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error)
	GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error)
	Delete(ctx context.Context, name string) error
}

// Job is what a collection needs to know of its job.
type Job struct {
	Tenant   string
	ID       string
	Attempt  int64
	Outputs  []string
	MaxBytes int64
	MaxFiles int64
	// Valid reports whether the attempt still holds the job's lease; it is asked before each put.
	Valid func() bool
}

// Result is what a collection stored.
type Result struct {
	Artifacts []job.Artifact // never nil
	Truncated bool           // a bound, or a failure, left a match out
}

// Collect stores the files of sb that j's outputs match, in path order, within j's bounds. On an
// error it returns what it stored before, with Truncated set.
//
// It walks twice: first to choose the files within the bounds and record their names in the
// attempt's manifest, with one put, then to store them. Nothing changes in between: no process of
// the sandbox is left.
func Collect(ctx context.Context, sb sandbox.FileReader, store Store, j Job) (Result, error) {
	res := Result{Artifacts: []job.Artifact{}}
	chosen := map[string]int64{}
	var names []string
	var total int64
	err := sb.ReadFiles(ctx, func(p string) bool { return matchAny(j.Outputs, p) }, func(p string, size int64, _ io.Reader) error {
		if !utf8.ValidString(p) {
			// Settlements are JSON, which would list the name with U+FFFD: an object nobody can
			// fetch by the name listed, and two names that differ in the bad bytes listed as one.
			res.Truncated = true
			return nil
		}
		if int64(len(chosen)) >= j.MaxFiles || total+size > j.MaxBytes {
			res.Truncated = true
			return fs.SkipAll
		}
		total += size
		chosen[p] = size
		names = append(names, job.ArtifactObject(j.Tenant, j.ID, j.Attempt, p))
		return nil
	})
	if errors.Is(err, sandbox.ErrWalkBound) {
		// A bound of the job's own making, as artifact_files is: keep what came before it.
		res.Truncated, err = true, nil
	}
	if err != nil {
		res.Truncated = true
		return res, fmt.Errorf("collect artifacts of %s: %w", j.ID, err)
	}
	if len(chosen) == 0 {
		return res, nil
	}
	if !j.Valid() {
		return res, fmt.Errorf("collect artifacts of %s: %w", j.ID, ErrLeaseLost)
	}
	if err := putManifest(ctx, store, j.Tenant, j.ID, j.Attempt, names); err != nil {
		res.Truncated = true
		return res, fmt.Errorf("collect artifacts of %s: %w", j.ID, err)
	}
	// A put that met a passing fault (a timeout under load, a stream leader election) is tried
	// again, from a second read of its file: one slow ack must not cut the job's artifacts short.
	var again []string
	put := func(p string, size int64, r io.Reader) error {
		if size != chosen[p] {
			return fmt.Errorf("%s changed size from %d to %d", p, chosen[p], size)
		}
		if !j.Valid() {
			return ErrLeaseLost
		}
		name := job.ArtifactObject(j.Tenant, j.ID, j.Attempt, p)
		h := sha256.New()
		info, err := store.Put(ctx, jetstream.ObjectMeta{Name: name}, io.TeeReader(r, h))
		if err != nil && passing(err) && ctx.Err() == nil {
			again = append(again, p)
			return nil
		}
		if err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		if int64(info.Size) != size {
			return fmt.Errorf("put %s: stored %d bytes of %d", name, info.Size, size)
		}
		res.Artifacts = append(res.Artifacts, job.Artifact{Path: p, Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), Object: name})
		return nil
	}
	err = sb.ReadFiles(ctx, func(p string) bool { _, ok := chosen[p]; return ok }, put)
	for try := 1; err == nil && len(again) > 0 && try <= putTries; try++ {
		retry := again
		again = nil
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			err = sb.ReadFiles(ctx, func(p string) bool { return slices.Contains(retry, p) }, put)
		}
	}
	slices.SortFunc(res.Artifacts, func(a, b job.Artifact) int { return strings.Compare(a.Path, b.Path) })
	if errors.Is(err, sandbox.ErrWalkBound) {
		err = nil // after every chosen file, as before: the count below says
	}
	if err == nil && len(res.Artifacts) != len(chosen) {
		err = fmt.Errorf("%d of %d files left the workspace", len(chosen)-len(res.Artifacts), len(chosen))
	}
	if err != nil {
		res.Truncated = true
		return res, fmt.Errorf("collect artifacts of %s: %w", j.ID, err)
	}
	return res, nil
}

// putTries bounds the second reads of files whose put met a passing fault.
const putTries = 3

// passing reports whether a put's error may pass when tried again.
func passing(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

func matchAny(patterns []string, p string) bool {
	for _, pat := range patterns {
		if job.MatchOutput(pat, p) {
			return true
		}
	}
	return false
}

// manifest names the objects an attempt stored, or was about to.
func manifest(tenant, id string, attempt int64) string {
	return tenant + "/" + id + "/" + strconv.FormatInt(attempt, 10)
}

func putManifest(ctx context.Context, store Store, tenant, id string, attempt int64, names []string) error {
	b, err := json.Marshal(names)
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, jetstream.ObjectMeta{Name: manifest(tenant, id, attempt)}, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("put manifest of %s attempt %d: %w", id, attempt, err)
	}
	return nil
}

// Sweep removes every object that attempts 1 to upTo of tenant's job id recorded in their manifests and
// that keep does not list. The settling attempt calls it before it settles,
// with the artifacts its settlement lists (none after a takeover).
func Sweep(ctx context.Context, store Store, tenant, id string, upTo int64, keep []job.Artifact) error {
	kept := make(map[string]bool, len(keep))
	for _, a := range keep {
		kept[a.Object] = true
	}
	var errs []error
	for attempt := int64(1); attempt <= upTo; attempt++ {
		b, err := store.GetBytes(ctx, manifest(tenant, id, attempt))
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read manifest of %s attempt %d: %w", id, attempt, err))
			continue
		}
		var names []string
		if err := json.Unmarshal(b, &names); err != nil {
			errs = append(errs, fmt.Errorf("manifest of %s attempt %d: %w", id, attempt, err))
			continue
		}
		for _, n := range names {
			if kept[n] {
				continue
			}
			if err := store.Delete(ctx, n); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				errs = append(errs, fmt.Errorf("delete %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Forget removes the manifests of attempts 1 to upTo of tenant's job id, once its settlement is stored:
// until then, an attempt that takes the job over needs them to sweep.
func Forget(ctx context.Context, store Store, tenant, id string, upTo int64) error {
	var errs []error
	for attempt := int64(1); attempt <= upTo; attempt++ {
		if err := store.Delete(ctx, manifest(tenant, id, attempt)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, fmt.Errorf("delete manifest of %s attempt %d: %w", id, attempt, err))
		}
	}
	return errors.Join(errs...)
}
