//go:build linux

package topology

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPUTime is the CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID), or -1.
func threadCPUTime() time.Duration {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return -1
	}
	return time.Duration(ts.Nano())
}
