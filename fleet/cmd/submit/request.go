package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runfleet/runfleet/fleet/internal/cli"
	"github.com/runfleet/runfleet/job"
)

var extLang = map[string]string{".py": "python3", ".js": "nodejs", ".mjs": "nodejs", ".cjs": "nodejs"}

// buildRequest makes the job of the command line: o and the flags given, FILE (files holds the
// positional arguments), the program's arguments after --, and submit's standard input.
func buildRequest(o *options, given map[string]bool, files, progArgs []string, stdin io.Reader) (job.Request, error) {
	req := job.Request{ID: o.id, Language: o.lang, Code: o.code, Preload: o.preload, Args: progArgs}
	codeFromStdin := false
	switch {
	case len(files) > 1:
		return req, usageError(fmt.Errorf("one FILE at most, got %d: %s (the program's own arguments go after --)", len(files), strings.Join(files, " ")))
	case len(files) == 1 && given["code"]:
		return req, usageError(errors.New("give --code or FILE, not both"))
	case len(files) == 1 && files[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return req, fmt.Errorf("read code from stdin: %w", err)
		}
		req.Code, codeFromStdin = string(b), true
	case len(files) == 1:
		b, err := os.ReadFile(files[0])
		if err != nil {
			return req, err
		}
		req.Code = string(b)
		if req.Language == "" {
			req.Language = extLang[strings.ToLower(filepath.Ext(files[0]))]
		}
	case !given["code"]:
		return req, usageError(errors.New("no code: give FILE, - for stdin, or --code"))
	}
	if req.Language == "" {
		return req, usageError(errors.New("no language: give --lang python3 or --lang nodejs"))
	}
	var err error
	if req.Stdin, err = jobStdin(o, given, codeFromStdin, stdin); err != nil {
		return req, err
	}
	if req.Env, err = pairs("--env", o.env); err != nil {
		return req, err
	}
	if req.Labels, err = pairs("--label", o.labels); err != nil {
		return req, err
	}
	for _, f := range o.files {
		src, dest, ok := strings.Cut(f, ":")
		if !ok {
			dest = filepath.Base(src)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return req, fmt.Errorf("--file: %w", err)
		}
		info, err := os.Stat(src)
		if err != nil {
			return req, fmt.Errorf("--file: %w", err)
		}
		req.Files = append(req.Files, job.File{Path: dest, Content: b, Mode: uint32(info.Mode().Perm())})
	}
	if err := limits(o, &req.Limits); err != nil {
		return req, err
	}
	if o.deadline != "" {
		if req.Deadline, err = deadline(o.deadline, time.Now()); err != nil {
			return req, err
		}
	}
	if req.ID == "" {
		req.ID = uuid.NewString()
	}
	return req, nil
}

// jobStdin is what the program reads: --stdin, --stdin-file, or submit's own standard input when
// it is a pipe or a file. A terminal is never read: submit would wait for the user's typing.
func jobStdin(o *options, given map[string]bool, codeFromStdin bool, stdin io.Reader) (string, error) {
	switch {
	case given["stdin"] && given["stdin-file"]:
		return "", usageError(errors.New("give --stdin or --stdin-file, not both"))
	case given["stdin"]:
		return o.stdin, nil
	case given["stdin-file"]:
		b, err := os.ReadFile(o.stdinFile)
		if err != nil {
			return "", fmt.Errorf("--stdin-file: %w", err)
		}
		return string(b), nil
	case codeFromStdin || stdin == nil:
		return "", nil
	}
	if f, ok := stdin.(*os.File); ok {
		info, err := f.Stat()
		if err != nil || info.Mode()&os.ModeCharDevice != 0 {
			return "", nil
		}
	}
	b, err := io.ReadAll(stdin)
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	return string(b), nil
}

// pairs parses repeated K=V flags.
func pairs(flagName string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(list))
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError(fmt.Errorf("%s %q: want K=V", flagName, kv))
		}
		m[k] = v
	}
	return m, nil
}

// deadline reads an RFC 3339 time, or a duration from now.
func deadline(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, usageError(fmt.Errorf("--deadline %q: want an RFC 3339 time (2026-12-02T13:30:00Z) or a duration from now (10m)", s))
}

func limits(o *options, l *job.Limits) error {
	if o.timeout != "" {
		d, err := time.ParseDuration(o.timeout)
		if err != nil || d <= 0 {
			return usageError(fmt.Errorf("--timeout %q: want a positive duration like 10s", o.timeout))
		}
		l.Timeout = d
	}
	var err error
	if l.OutputBytes, err = optBytes("--output-bytes", o.outputBytes); err != nil {
		return err
	}
	if l.MemoryBytes, err = optBytes("--memory", o.memory); err != nil {
		return err
	}
	if o.pids != "" {
		n, err := strconv.ParseInt(o.pids, 10, 64)
		if err != nil || n <= 0 {
			return usageError(fmt.Errorf("--pids %q: want a positive whole number", o.pids))
		}
		l.Pids = n
	}
	return nil
}

// optBytes parses a size as every size flag does (cli.ParseSize); "" is 0, the default.
func optBytes(flagName, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := cli.ParseSize(s)
	if err != nil {
		return 0, usageError(fmt.Errorf("%s %w", flagName, err))
	}
	if n == 0 {
		return 0, usageError(fmt.Errorf("%s %q: want a positive size", flagName, s))
	}
	return n, nil
}

// usageError marks err as the command line's: submit exits exitUsage, having connected to nothing.
func usageError(err error) error { return &cli.UsageError{Err: err} }
