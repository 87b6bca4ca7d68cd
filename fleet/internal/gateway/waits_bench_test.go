package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runfleet/runfleet/fleet/internal/gateway"
)

// BenchmarkConcurrentWaits holds RUNFLEET_BENCH_WAITS (default 10,000) requests waiting
// (?wait=true) in the gateway binary beside one worker, then stores each job's settlement as a
// worker would, one after another, and reads every answer. It reports the results stream's
// consumers while they wait (consumers, want 0), the gateway's resident memory and Go heap per
// waiting request against the same process idle, the requests answered with anything but 200
// (refused, want 0), and the time from a settlement's publish to its HTTP answer (p50_us,
// p99_us). The jobs wait on a queue the worker does not serve, so that the settlements, not the
// worker's pace, decide when they end. Run it with -benchtime=1x.
func BenchmarkConcurrentWaits(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("RUNFLEET_BENCH_WAITS")); err == nil && v > 0 {
		n = v
	}
	f := newFleet(b, gateway.Options{})
	f.startWorker()
	p := f.startBinary("--max-wait", "30m")
	addr := strings.TrimPrefix(p.URL, "http://")
	metric := func(name string) float64 {
		req, _ := http.NewRequest("GET", p.URL+"/metrics", nil)
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
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
	js, err := jetstream.New(f.nats.Conn())
	if err != nil {
		b.Fatal(err)
	}
	s := f.client.Subjects()
	for b.Loop() {
		rss0, heap0 := rss(), metric("go_memstats_heap_inuse_bytes")
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		answered := make([]time.Time, n)
		status := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			body := fmt.Sprintf(`{"id":"w%s-%d","language":"python3","code":"print(1)"}`, run, i)
			fmt.Fprintf(c, "POST /v1/jobs?wait=true&queue=idle HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				addr, apiKey, len(body), body)
			wg.Go(func() {
				defer c.Close()
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				answered[i] = time.Now()
				if err != nil {
					return
				}
				status[i] = resp.StatusCode
				resp.Body.Close()
			})
		}
		deadline := time.Now().Add(10 * time.Minute)
		for metric("runfleet_gateway_waiting") < float64(n) {
			if time.Now().After(deadline) {
				b.Fatalf("%v requests waiting after 10 min, want %d", metric("runfleet_gateway_waiting"), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		consumers := f.consumers()
		rssPer, heapPer := (rss()-rss0)/float64(n), (metric("go_memstats_heap_inuse_bytes")-heap0)/float64(n)

		settled := make([]time.Time, n)
		for i := range n {
			id := fmt.Sprintf("w%s-%d", run, i)
			settled[i] = time.Now()
			if _, err := js.Publish(b.Context(), s.Settled("default", id), fmt.Appendf(nil, `{"job_id":%q,"status":"succeeded"}`, id)); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		refused := 0
		lat := make([]time.Duration, 0, n)
		for i := range n {
			if status[i] != http.StatusOK {
				refused++
				continue
			}
			lat = append(lat, answered[i].Sub(settled[i]))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(consumers), "consumers")
		b.ReportMetric(float64(refused), "refused")
		b.ReportMetric(rssPer, "rss_B/wait")
		b.ReportMetric(heapPer, "heap_B/wait")
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_us")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_us")
		}
	}
}
