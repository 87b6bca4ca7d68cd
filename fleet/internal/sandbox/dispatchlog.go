package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Dispatch is one entry of a [DispatchLog]: a job's payload entered a sandbox.
type Dispatch struct {
	JobID   string    `json:"job_id"`
	Attempt int64     `json:"attempt"`
	Sandbox string    `json:"sandbox"`
	Worker  string    `json:"worker"`
	At      time.Time `json:"at"`
}

// DispatchLog is a provider's own append-only record of every payload it let into a sandbox. It
// is written by the provider, not the runner, so that tests and audits observe "ran at most once"
// instead of trusting the bookkeeping that is meant to ensure it. A zero DispatchLog records nothing.
type DispatchLog struct {
	Path string
}

// Record appends one entry. Each entry is a single write on an O_APPEND file, so entries from
// several worker processes never interleave, and an entry written before a crash stays.
func (l DispatchLog) Record(job Job, sandboxID string) error {
	if l.Path == "" {
		return nil
	}
	b, err := json.Marshal(Dispatch{JobID: job.ID, Attempt: job.Attempt, Sandbox: sandboxID, Worker: job.Worker, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("dispatch log: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	return errors.Join(werr, f.Close())
}

// ReadDispatchLog returns the entries of the log at path; a missing file has none.
func ReadDispatchLog(path string) ([]Dispatch, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Dispatch
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d Dispatch
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return out, fmt.Errorf("dispatch log %s: %w", path, err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// CountDispatches returns, per job id, how many payloads the log at path records.
func CountDispatches(path string) (map[string]int, error) {
	return countBy(path, func(d Dispatch) string { return d.JobID })
}

// CountSandboxUses returns, per sandbox id, how many payloads the log at path records: a sandbox
// used once shows 1.
func CountSandboxUses(path string) (map[string]int, error) {
	return countBy(path, func(d Dispatch) string { return d.Sandbox })
}

func countBy(path string, key func(Dispatch) string) (map[string]int, error) {
	ds, err := ReadDispatchLog(path)
	out := make(map[string]int, len(ds))
	for _, d := range ds {
		out[key(d)]++
	}
	return out, err
}
