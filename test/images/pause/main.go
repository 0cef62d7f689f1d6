// Command pause is the lab's pod sandbox image (containerd's sandbox_image on real lab nodes):
// the first process of every pod, which holds its namespaces. It blocks until SIGINT or SIGTERM
// and reaps the children re-parented to it (a pod sharing its process namespace).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
