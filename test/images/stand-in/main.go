// Command stand-in is the lab's stand-in workload: real lab nodes run it for every image that is
// not one of the lab's own (busybox, ubuntu, the seeds' vllm and neuronx images), installed in
// its image also as /bin/sh, /bin/bash, /usr/bin/env, /bin/sleep, /bin/ls and python3, so that
// whatever command a manifest gives runs it. Whatever its arguments, it prints its environment,
// one NAME=value per line sorted by name, then one line listing the Neuron device nodes it can
// see, sorted by number (`devices: /dev/neuron0 /dev/neuron1`, or `devices: none`), and sleeps
// until it is stopped. `kubectl logs` shows what the container got.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-neuron/kube-neuron/internal/lab/standin"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if _, err := os.Stdout.WriteString(standin.Text(os.Environ(), standin.DeviceNodes("/dev"))); err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
	}
	<-sigs
}
