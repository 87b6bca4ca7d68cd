package docker_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/profile"
	"github.com/runfleet/runfleet/fleet/internal/providers/docker"
	"github.com/runfleet/runfleet/fleet/internal/providers/providertest"
	"github.com/runfleet/runfleet/job"
)

// freezer passes connections through to the real daemon's socket until frozen: then it reads
// on but writes nothing, as a hung daemon answers nothing.
type freezer struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, upstream string) *freezer {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "docker.sock"))
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", upstream)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			f.wg.Go(func() { f.pipe(u, c) })
			f.wg.Go(func() { f.pipe(c, u) })
		}
	})
	t.Cleanup(f.close)
	return f
}

// pipe copies src to dst; a side that ends closes both.
func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		for f.frozen {
			f.cond.Wait()
		}
		f.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.mu.Unlock()
	f.cond.Broadcast()
}

func (f *freezer) close() {
	f.set(false)
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// TestHungDaemon: a daemon that stops answering while a job runs cannot hang its kill: Run
// returns within KillWait of the kill, and the container is removed once the daemon answers.
func TestHungDaemon(t *testing.T) {
	_, profiles := newProvider(t) // skips without a daemon
	f := startFreezer(t, "/var/run/docker.sock")
	t.Setenv("DOCKER_HOST", "unix://"+f.ln.Addr().String())
	const killWait = 2 * time.Second
	p, err := docker.New(t.Context(), docker.Options{Fleet: fleet, KillWait: killWait, InitBinary: staticInit(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sb := providertest.Create(t.Context(), t, providertest.Env{Provider: p}, profiles["python3"], nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(b []byte) (int, error) {
		once.Do(func() { close(started) })
		return len(b), nil
	})
	payload, _ := profile.Payload(job.Request{Code: "print('started', flush=True)\nwhile True: pass"})
	done := make(chan error, 1)
	go func() {
		_, err := sb.Run(ctx, bytes.NewReader(payload), out, io.Discard)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Run() ended before the program printed: %v", err)
	}
	f.set(true)
	cancel()
	killed := time.Now()
	select {
	case err := <-done:
		t.Logf("Run() returned %v after the kill, with the daemon hung: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(killWait + 20*time.Second):
		t.Fatalf("Run() still waits %v after the kill of a sandbox whose daemon hangs", killWait+20*time.Second)
	}
	f.set(false)
	if err := sb.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy() once the daemon answers = %v", err)
	}
	if left := containerLeft(t, sb.ID()); left != "" {
		t.Errorf("after Destroy, left on the host: %s", left)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }
