package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ProcessOptions configure StartProcess.
type ProcessOptions struct {
	// Name identifies the process in errors, logs and state.json.
	Name string
	// Path is the binary; a name without a slash is looked up in PATH. The process sees its
	// absolute path as argv[0], which is what StopFromState matches /proc/<pid>/cmdline against.
	Path string
	// Args are the arguments after argv[0].
	Args []string
	// Env is added to the environment of the calling process (KEY=value entries; later wins).
	Env []string
	// LogPath receives stdout and stderr (appended; parent directories are created).
	// Empty discards the output.
	LogPath string
	// NetNS is a network namespace file (/proc/<pid>/ns/net) to run the process in: nsenter
	// (util-linux) enters it and executes Path, so the process keeps its pid and argv[0].
	NetNS string
	// Cloneflags are namespaces the process starts in (CLONE_NEW*), for a real node's init.
	Cloneflags uintptr
	// ExtraFiles are passed to the process as file descriptors 3 and up.
	ExtraFiles []*os.File
	// Detach puts the process in its own session (Setsid) without a parent-death signal, so it
	// outlives the caller. Otherwise it gets its own process group and Pdeathsig SIGKILL: it dies
	// with the calling process, even when that process is killed.
	Detach bool
}

// Process is a host process started by StartProcess.
type Process struct {
	name    string
	path    string
	args    []string
	logPath string
	cmd     *exec.Cmd

	exited  chan struct{}
	exitErr error // written before exited is closed
}

// StartProcess starts a process as o describes and returns once it runs. The process is not
// tied to any context: stop it with Stop (or StopFromState after AddToState).
func StartProcess(o ProcessOptions) (*Process, error) {
	if o.Name == "" {
		return nil, errors.New("start process: ProcessOptions.Name is empty: give the process a name")
	}
	if o.Path == "" {
		return nil, fmt.Errorf("start process %s: ProcessOptions.Path is empty: give the binary to run", o.Name)
	}
	path, err := exec.LookPath(o.Path)
	if err != nil {
		return nil, fmt.Errorf("start process %s: binary %s not found or not executable (build it first): %w", o.Name, o.Path, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("start process %s: absolute path of %s: %w", o.Name, o.Path, err)
	}

	var out *os.File
	if o.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(o.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("start process %s: create log directory (check permissions): %w", o.Name, err)
		}
		out, err = os.OpenFile(o.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	} else {
		out, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("start process %s: open log file: %w", o.Name, err)
	}

	cmd := &exec.Cmd{
		Path:   path,
		Args:   append([]string{path}, o.Args...),
		Stdout: out, // an *os.File is handed to the child as is: Wait does not wait for grandchildren
		Stderr: out,
	}
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	if o.NetNS != "" {
		nsenter, err := exec.LookPath("nsenter")
		if err != nil {
			_ = out.Close()
			return nil, fmt.Errorf("start process %s in a network namespace: nsenter (util-linux) not found: %w", o.Name, err)
		}
		cmd.Path = nsenter
		cmd.Args = append([]string{nsenter, "--net=" + o.NetNS, "--", path}, o.Args...)
	}
	if o.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	cmd.SysProcAttr.Cloneflags = o.Cloneflags
	cmd.ExtraFiles = o.ExtraFiles
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("start process %s (%s): %w", o.Name, path, err)
	}
	p := &Process{name: o.Name, path: path, args: slices.Clone(o.Args), logPath: o.LogPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		_ = out.Close()
		close(p.exited)
	}()
	return p, nil
}

// Name is ProcessOptions.Name.
func (p *Process) Name() string { return p.name }

// Path is the absolute path of the binary (argv[0] of the process).
func (p *Process) Path() string { return p.path }

// LogPath is ProcessOptions.LogPath.
func (p *Process) LogPath() string { return p.logPath }

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited (and has been reaped).
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitError is the result of waiting for the process (nil for exit status 0, an
// *exec.ExitError otherwise); it is nil while the process runs.
func (p *Process) ExitError() error {
	select {
	case <-p.exited:
		return p.exitErr
	default:
		return nil
	}
}

// killTimeout bounds the wait for a process after SIGKILL.
const killTimeout = 10 * time.Second

// Stop sends SIGTERM to the process (and its process group), waits up to grace for it to
// exit, then sends SIGKILL. It returns nil once the process is gone, whatever its exit status
// (see ExitError); calling it again, or on a process that already exited, returns nil.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
	}
	p.signal(syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(killTimeout):
		return fmt.Errorf("process %s (pid %d) did not exit %v after SIGKILL: check it with `ps -p %d -o stat,cmd`",
			p.name, p.PID(), killTimeout, p.PID())
	}
}

// signal signals the process group the process leads, and the process itself.
func (p *Process) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
		return // reaped: the PID may belong to someone else now
	default:
	}
	_ = syscall.Kill(-p.PID(), sig)
	_ = p.cmd.Process.Signal(sig)
}

// Stop orders: StopFromState and ControlPlane.Stop stop lower orders first; processes of one
// order are stopped concurrently.
const (
	// StopOrderComponent is for lab components (simulators, extenders, drivers): stopped first.
	StopOrderComponent = 0
	// StopOrderControllers is for kube-scheduler processes and kube-controller-manager.
	StopOrderControllers = 10
	// StopOrderAPIServer is for kube-apiserver (10 s grace before SIGKILL).
	StopOrderAPIServer = 20
	// StopOrderEtcd is for etcd: stopped last, since an apiserver without etcd hangs in shutdown.
	StopOrderEtcd = 30
)

// StopGrace is how long StopFromState and ControlPlane.Stop wait after SIGTERM before SIGKILL
// for a process of the given stop order: 10 s for the apiserver, 5 s for everything else.
func StopGrace(stopOrder int) time.Duration {
	if stopOrder == StopOrderAPIServer {
		return 10 * time.Second
	}
	return 5 * time.Second
}

// StateFile is the name of the state file in a lab directory.
const StateFile = "state.json"

const stateLockFile = ".state.lock"

// State is one process recorded in <dir>/state.json (a JSON list of these records).
type State struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	Path      string `json:"path"`
	StopOrder int    `json:"stopOrder"`
}

// AddToState records p in dir/state.json (creating dir and the file if needed) so that
// StopFromState stops it, in the given stop order. Concurrent calls, also from other
// processes, serialize on a file lock.
func AddToState(dir string, p *Process, stopOrder int) error {
	return updateState(dir, func(s []State) []State {
		return append(s, State{Name: p.Name(), PID: p.PID(), Path: p.Path(), StopOrder: stopOrder})
	})
}

// RemoveFromState removes the records of the given PIDs from dir/state.json, and the file
// when no record is left.
func RemoveFromState(dir string, pids ...int) error {
	return updateState(dir, func(s []State) []State {
		return slices.DeleteFunc(s, func(e State) bool { return slices.Contains(pids, e.PID) })
	})
}

// ReadState returns the records of dir/state.json; a missing file is an empty state.
func ReadState(dir string) ([]State, error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	var s []State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("parse lab state %s (delete it once no lab process runs): %w",
			filepath.Join(dir, StateFile), err)
	}
	return s, nil
}

func updateState(dir string, change func([]State) []State) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create lab directory %s (check permissions): %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, stateLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open lab state lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock lab state %s: %w", lock.Name(), err)
	}
	// Closing the file releases the lock.

	s, err := ReadState(dir)
	if err != nil {
		return err
	}
	s = change(s)
	path := filepath.Join(dir, StateFile)
	if len(s) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove empty lab state: %w", err)
		}
		return nil
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode lab state: %w", err)
	}
	if err := writeFile0600(path, append(data, '\n')); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return nil
}

// StopFromState stops the processes recorded in dir/state.json, lower stop orders first
// (processes of one order concurrently): SIGTERM, StopGrace, then SIGKILL. A PID is only
// signalled while /proc/<pid>/cmdline names the recorded binary as argv[0], so a reused PID is
// left alone. Stopped records are removed from the state. A missing state is not an error.
func StopFromState(dir string) error {
	_, err := stopFromState(dir)
	return err
}

// stopFromState is StopFromState; it also returns the records of the processes that still ran
// and were stopped.
func stopFromState(dir string) ([]State, error) {
	entries, err := ReadState(dir)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	slices.SortStableFunc(entries, func(a, b State) int { return a.StopOrder - b.StopOrder })
	var errs []error
	var done []int
	var stopped []State
	for len(entries) > 0 {
		n := 1
		for n < len(entries) && entries[n].StopOrder == entries[0].StopOrder {
			n++
		}
		group := entries[:n]
		entries = entries[n:]
		var wg sync.WaitGroup
		groupErrs := make([]error, len(group))
		ran := make([]bool, len(group))
		for i, e := range group {
			wg.Go(func() { ran[i], groupErrs[i] = stopRecorded(e) })
		}
		wg.Wait()
		for i, e := range group {
			if groupErrs[i] == nil {
				done = append(done, e.PID)
			}
			if ran[i] {
				stopped = append(stopped, e)
			}
		}
		errs = append(errs, groupErrs...)
	}
	if err := RemoveFromState(dir, done...); err != nil {
		errs = append(errs, err)
	}
	return stopped, errors.Join(errs...)
}

// stopRecorded stops one recorded process if it still runs the recorded binary, and says
// whether it ran.
func stopRecorded(e State) (bool, error) {
	if e.PID <= 1 || !pidRuns(e.PID, e.Path) {
		return false, nil
	}
	group := false
	if pgid, err := syscall.Getpgid(e.PID); err == nil && pgid == e.PID {
		group = true
	}
	send := func(sig syscall.Signal) {
		if !pidRuns(e.PID, e.Path) {
			return
		}
		if group {
			_ = syscall.Kill(-e.PID, sig)
		}
		_ = syscall.Kill(e.PID, sig)
	}
	gone := func(d time.Duration) bool {
		deadline := time.Now().Add(d)
		for {
			if !pidRuns(e.PID, e.Path) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	send(syscall.SIGTERM)
	if gone(StopGrace(e.StopOrder)) {
		return true, nil
	}
	send(syscall.SIGKILL)
	if gone(killTimeout) {
		return true, nil
	}
	return true, fmt.Errorf("process %s (pid %d) still runs %v after SIGKILL: check it with `ps -p %d -o stat,cmd`",
		e.Name, e.PID, killTimeout, e.PID)
}

// pidRuns reports whether pid is a live process whose argv[0] is path. Zombies have an empty
// cmdline, so a process that exited counts as gone even before its parent reaps it.
func pidRuns(pid int, path string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return false
	}
	argv0, _, _ := bytes.Cut(data, []byte{0})
	return string(argv0) == path
}
