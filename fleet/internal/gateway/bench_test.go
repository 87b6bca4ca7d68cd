package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
	"github.com/runfleet/runfleet/job"
)

// BenchmarkWaitOverhead runs the same jobs on the same fleet through the runfleet client
// (Submit then Watch, what `submit` does) and through the gateway (POST /v1/jobs?wait=true), in
// alternating rounds, and reports both p50 latencies, both rates and their ratios: for a python3
// job, and for a job the worker settles rejected without a sandbox (an unknown language), where
// the protocol's own path is all there is.
func BenchmarkWaitOverhead(b *testing.B) {
	f := newFleet(b, gateway.Options{})
	f.startWorker()
	for _, row := range []struct {
		name string
		req  job.Request
		want job.Status
	}{
		{"python3", job.Request{Language: "python3", Code: "print(1)"}, job.StatusSucceeded},
		{"rejected-no-sandbox", job.Request{Language: "cobol", Code: "x"}, job.StatusRejected},
	} {
		b.Run(row.name, func(b *testing.B) { benchOverhead(b, f, row.req, row.want) })
	}
}

func benchOverhead(b *testing.B, f *fleet, code job.Request, want job.Status) {
	const concurrency = 4
	body, _ := json.Marshal(code)
	viaClient := func(ctx context.Context) error {
		sub, err := f.client.Submit(ctx, "", code, nil)
		if err != nil {
			return err
		}
		st, err := f.client.Watch(ctx, sub.ID, nil)
		if err == nil && st.Status != want {
			err = fmt.Errorf("status %s", st.Status)
		}
		return err
	}
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	defer httpClient.CloseIdleConnections()
	viaGateway := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/jobs?wait=true", strings.NewReader(string(body)))
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st job.Settlement
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || st.Status != want {
			return fmt.Errorf("%d %s", resp.StatusCode, st.Status)
		}
		return nil
	}
	// Warm both paths: the worker's sandboxes, the HTTP connections.
	for range 2 * concurrency {
		if err := viaClient(b.Context()); err != nil {
			b.Fatal(err)
		}
		if err := viaGateway(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	var client, gw stats
	b.ResetTimer()
	for round := range 4 {
		n := max(b.N/4, 1)
		if round%2 == 0 {
			client.add(load(b, n, concurrency, viaClient))
			gw.add(load(b, n, concurrency, viaGateway))
		} else {
			gw.add(load(b, n, concurrency, viaGateway))
			client.add(load(b, n, concurrency, viaClient))
		}
	}
	b.StopTimer()
	b.ReportMetric(client.p50().Seconds()*1000, "client-p50-ms")
	b.ReportMetric(gw.p50().Seconds()*1000, "gateway-p50-ms")
	b.ReportMetric(float64(gw.p50())/float64(client.p50()), "p50-ratio")
	b.ReportMetric(client.rate(), "client-jobs/s")
	b.ReportMetric(gw.rate(), "gateway-jobs/s")
	b.ReportMetric(gw.rate()/client.rate(), "jobs/s-ratio")
}

type stats struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (s *stats) add(o stats) { s.lat, s.elapsed = append(s.lat, o.lat...), s.elapsed+o.elapsed }

func (s *stats) p50() time.Duration {
	slices.Sort(s.lat)
	return s.lat[len(s.lat)/2]
}

func (s *stats) rate() float64 { return float64(len(s.lat)) / s.elapsed.Seconds() }

// load runs n calls of one, concurrency at a time, and returns their latencies.
func load(b *testing.B, n, concurrency int, one func(context.Context) error) stats {
	var mu sync.Mutex
	var out stats
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for range jobs {
				t0 := time.Now()
				if err := one(b.Context()); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				out.lat = append(out.lat, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

// BenchmarkWaitingMemory holds 1,000 requests waiting (?wait=true on a queue no worker serves) in
// the gateway binary and reports what they cost it: resident memory and Go heap per waiting
// request, against the same process idle. 1,000 is also nats-server's default limit of consumers
// per stream, one per waiting request.
func BenchmarkWaitingMemory(b *testing.B) {
	const n = 1000
	f := newFleet(b, gateway.Options{})
	p := f.startBinary()
	addr := strings.TrimPrefix(p.URL, "http://")
	client := &http.Client{}
	defer client.CloseIdleConnections()
	metric := func(name string) float64 {
		req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
		b.Fatalf("no metric %s", name)
		return 0
	}
	rss := func() float64 {
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(string(s)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				return kb * 1024
			}
		}
		b.Fatal("no VmRSS")
		return 0
	}
	rss0, heap0 := rss(), metric("go_memstats_heap_inuse_bytes") // the idle process
	var rssSum, heapSum, goroutines float64
	for iter := range b.N {
		conns := holdWaiting(b, addr, n)
		deadline := time.Now().Add(2 * time.Minute)
		for metric("runfleet_gateway_waiting") < n {
			if time.Now().After(deadline) {
				b.Fatalf("iteration %d: %v requests waiting after 2 min, want %d", iter, metric("runfleet_gateway_waiting"), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rssSum += rss() - rss0
		heapSum += metric("go_memstats_heap_inuse_bytes") - heap0
		goroutines += metric("go_goroutines")
		for _, c := range conns {
			c.Close()
		}
		for metric("runfleet_gateway_waiting") > 0 || f.consumers() > 0 {
			if time.Now().After(deadline) {
				b.Fatal("requests still waiting 2 min after their clients left")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	per := float64(b.N) * n
	b.ReportMetric(rssSum/per, "rss-bytes/waiting")
	b.ReportMetric(heapSum/per, "heap-bytes/waiting")
	b.ReportMetric(goroutines/per, "goroutines/waiting")
}
