// Command cyclerate measures the Go client's cycle rate (acquire then
// release, each goroutine on its own key) against a running node, for
// the comparison with the Rust client and a raw socket in
// docs/benchmarks.md (benches/client_rates.sh runs all three side by
// side).
//
//	go run ./internal/cyclerate 127.0.0.1:7411 5
//
// It prints one line per load, "<load> <cycles per second>": c1 (one
// goroutine), c16 (16 goroutines) and pipelined (256 goroutines, so up to
// 128 requests in flight on each of the client's two connections).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	baton "example.invalid/baton/clients/go"
)

var loads = []struct {
	name       string
	goroutines int
}{{"c1", 1}, {"c16", 16}, {"pipelined", 256}}

func main() {
	addr, seconds := "127.0.0.1:7411", 5.0
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	if len(os.Args) > 2 {
		s, err := strconv.ParseFloat(os.Args[2], 64)
		if err != nil {
			fail(err)
		}
		seconds = s
	}
	ctx := context.Background()
	client, err := baton.Dial(ctx, []string{addr})
	if err != nil {
		fail(err)
	}
	defer client.Close(ctx)
	// Warm-up: connections made, the runtime's pools settled.
	if _, err := cycles(client, 16, 500*time.Millisecond); err != nil {
		fail(err)
	}
	for _, load := range loads {
		rate, err := cycles(client, load.goroutines, time.Duration(seconds*float64(time.Second)))
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s %.0f\n", load.name, rate)
	}
}

// cycles is the cycles per second of n goroutines for length.
func cycles(client *baton.Client, n int, length time.Duration) (float64, error) {
	ctx := context.Background()
	end := time.Now().Add(length)
	var total atomic.Uint64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "rate/" + strconv.Itoa(i)
			opts := baton.AcquireOptions{Wait: 5 * time.Second, Lease: 30 * time.Second}
			for time.Now().Before(end) {
				lock, err := client.Acquire(ctx, key, opts)
				if err == nil {
					err = lock.Release(ctx)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cyclerate:", err)
	os.Exit(1)
}
