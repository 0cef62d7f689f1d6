//go:build e2e

// Package benchutil is the harness the throughput benchmarks under test/bench share: the control
// plane they start (StartLab), the fake fleet (CreateNodes), the backlog and the measurement of
// its drain (BacklogPod, WatchBindings, Rate, CPUSeconds), the schedulers' metrics (Scrape,
// HistogramMean) and the report (CPUTable, WriteReport). Each benchmark keeps what it alone
// measures.
package benchutil

import (
	"os"
	"strconv"
	"sync"
	"testing"
)

// EnvInt is the positive integer in environment variable name, def when it is unset.
func EnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// Parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func Parallel(n, workers int, fn func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
					for range next { // drain
					}
					return
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}
