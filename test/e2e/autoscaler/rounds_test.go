//go:build e2e

package autoscaler

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-neuron/kube-neuron/test/e2e/framework"
)

// roundsMetric counts the autoscaler's planning rounds: every round observes the time of its
// scale-up step (checks, plan, launches) once, at the step's end.
const roundsMetric = "neuron_autoscaler_decision_duration_seconds_count"

// metricsURL is the /metrics of the autoscaler that setup started last (the tests of this
// package run one at a time).
var metricsURL string

// freeAddress returns a loopback address whose port was free when asked.
func freeAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// rounds returns how many rounds the running autoscaler has finished the scale-up step of.
func rounds(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", metricsURL, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), roundsMetric+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			return int(n), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", metricsURL, roundsMetric)
}

// waitRounds waits until the autoscaler has finished the scale-up step of two more rounds than
// when it was called: a round makes every launch it decides within that step, so whatever the
// round under way (the one whose events the test saw) decides has been done by then.
func waitRounds(t *testing.T, ctx context.Context) {
	t.Helper()
	var start int
	framework.WaitFor(t, ctx, 30*time.Second, "the autoscaler's metrics", func(ctx context.Context) (bool, string, error) {
		n, err := rounds(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		start = n
		return true, "", nil
	})
	framework.WaitFor(t, ctx, 30*time.Second, fmt.Sprintf("two autoscaler rounds after round %d", start), func(ctx context.Context) (bool, string, error) {
		n, err := rounds(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return n >= start+2, fmt.Sprintf("%d rounds", n), nil
	})
}
