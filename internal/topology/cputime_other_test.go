//go:build !linux

package topology

import "time"

// threadCPUTime is the CPU time the calling thread has used; -1: not measured here.
func threadCPUTime() time.Duration { return -1 }
