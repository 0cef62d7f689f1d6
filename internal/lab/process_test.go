package lab

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTestProcess starts a process and makes sure it is gone when the test ends.
func startTestProcess(t *testing.T, o ProcessOptions) *Process {
	t.Helper()
	p, err := StartProcess(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(0) })
	return p
}

func waitForFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not contain %q after 5s; it holds %q", path, want, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exitSignal(err error) syscall.Signal {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return 0
}

func TestProcessStartStop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "logs", "sleep.log")
	p := startTestProcess(t, ProcessOptions{Name: "sleep", Path: "sleep", Args: []string{"60"}, LogPath: log})
	if p.PID() <= 0 {
		t.Fatalf("PID %d", p.PID())
	}
	if !filepath.IsAbs(p.Path()) || filepath.Base(p.Path()) != "sleep" {
		t.Errorf("Path %q, want the absolute path of sleep", p.Path())
	}
	// Right after exec the kernel may not have set up the new argv yet.
	for deadline := time.Now().Add(2 * time.Second); !pidRuns(p.PID(), p.Path()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/proc/%d/cmdline does not name %s", p.PID(), p.Path())
		}
	}
	if _, err := os.Stat(log); err != nil {
		t.Errorf("log file not created: %v", err)
	}
	if pgid, err := syscall.Getpgid(p.PID()); err != nil || pgid != p.PID() {
		t.Errorf("pgid %d (%v), want the process to lead its own group", pgid, err)
	}
	select {
	case <-p.Exited():
		t.Fatal("Exited closed while the process runs")
	default:
	}
	begin := time.Now()
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("Stop took %v for a process that exits on SIGTERM", d)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	if sig := exitSignal(p.ExitError()); sig != syscall.SIGTERM {
		t.Errorf("exit %v, want killed by SIGTERM", p.ExitError())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := syscall.Kill(p.PID(), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v after Stop, want ESRCH", p.PID(), err)
	}
}

func TestProcessStopEscalatesToKill(t *testing.T) {
	log := filepath.Join(t.TempDir(), "stubborn.log")
	// The shell ignores SIGTERM; its sleep children share its process group.
	p := startTestProcess(t, ProcessOptions{Name: "stubborn", Path: "/bin/sh", LogPath: log,
		Args: []string{"-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}})
	waitForFile(t, log, "ready")
	begin := time.Now()
	const grace = 300 * time.Millisecond
	if err := p.Stop(grace); err != nil {
		t.Fatal(err)
	}
	d := time.Since(begin)
	if d < grace || d > grace+3*time.Second {
		t.Errorf("Stop took %v, want the grace %v plus a little", d, grace)
	}
	if sig := exitSignal(p.ExitError()); sig != syscall.SIGKILL {
		t.Errorf("exit %v, want killed by SIGKILL", p.ExitError())
	}
	// The whole process group is gone (orphaned children may stay zombies until init reaps them).
	deadline := time.Now().Add(2 * time.Second)
	for {
		live := liveGroupMembers(t, p.PID())
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v after Stop", p.PID(), live)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// liveGroupMembers lists the PIDs of the processes in group pgid that are not zombies.
func liveGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		_, after, ok := strings.Cut(string(data), ") ")
		f := strings.Fields(after)
		if !ok || len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestProcessExitsOnItsOwn(t *testing.T) {
	log := filepath.Join(t.TempDir(), "env.log")
	p := startTestProcess(t, ProcessOptions{Name: "env", Path: "/bin/sh", LogPath: log,
		Env:  []string{"LAB_TEST_VALUE=hello"},
		Args: []string{"-c", `echo "value=$LAB_TEST_VALUE"; echo to-stderr >&2; exit 3`}})
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("process did not exit")
	}
	var ee *exec.ExitError
	if !errors.As(p.ExitError(), &ee) || ee.ExitCode() != 3 {
		t.Errorf("ExitError %v, want exit status 3", p.ExitError())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop of an exited process: %v", err)
	}
	data, _ := os.ReadFile(log)
	if !strings.Contains(string(data), "value=hello") || !strings.Contains(string(data), "to-stderr") {
		t.Errorf("log %q lacks stdout with the added environment, or stderr", data)
	}
}

func TestProcessDetach(t *testing.T) {
	p := startTestProcess(t, ProcessOptions{Name: "detached", Path: "sleep", Args: []string{"60"}, Detach: true})
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(p.PID()), 0, 0)
	if errno != 0 || int(sid) != p.PID() {
		t.Errorf("session id %d (%v), want the process to lead its own session", sid, errno)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestProcessStartErrors(t *testing.T) {
	for name, o := range map[string]ProcessOptions{
		"no name":        {Path: "sleep"},
		"no path":        {Name: "x"},
		"missing binary": {Name: "x", Path: "/nonexistent/kube-neuron-binary"},
		"bad log dir":    {Name: "x", Path: "sleep", Args: []string{"1"}, LogPath: "/proc/nonexistent/x.log"},
	} {
		if p, err := StartProcess(o); err == nil {
			_ = p.Stop(0)
			t.Errorf("%s: StartProcess succeeded, want an error", name)
		}
	}
}

func TestStateAddConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lab")
	p := startTestProcess(t, ProcessOptions{Name: "sleep", Path: "sleep", Args: []string{"60"}})
	const n = 40
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = AddToState(dir, p, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != n {
		t.Fatalf("state holds %d records after %d concurrent adds", len(s), n)
	}
	var orders []int
	for _, e := range s {
		if e.Name != "sleep" || e.PID != p.PID() || e.Path != p.Path() {
			t.Errorf("record %+v does not describe the process", e)
		}
		orders = append(orders, e.StopOrder)
	}
	slices.Sort(orders)
	for i, o := range orders {
		if o != i {
			t.Fatalf("stop orders %v, want 0..%d once each", orders, n-1)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("state mode %v", fi.Mode().Perm())
	}
	if err := RemoveFromState(dir, p.PID()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file still there after removing every record: %v", err)
	}
}

func TestStateStopFromStateMissing(t *testing.T) {
	if err := StopFromState(filepath.Join(t.TempDir(), "nothing")); err != nil {
		t.Errorf("StopFromState without state: %v", err)
	}
	s, err := ReadState(t.TempDir())
	if err != nil || len(s) != 0 {
		t.Errorf("ReadState of an empty dir = %v, %v", s, err)
	}
}

func TestStateStopFromStateIgnoresReusedPID(t *testing.T) {
	dir := t.TempDir()
	p := startTestProcess(t, ProcessOptions{Name: "sleep", Path: "sleep", Args: []string{"60"}})
	// A record whose binary is not what the PID runs now, as after PID reuse.
	if err := updateState(dir, func([]State) []State {
		return []State{{Name: "etcd", PID: p.PID(), Path: "/nonexistent/bin/etcd", StopOrder: StopOrderEtcd}}
	}); err != nil {
		t.Fatal(err)
	}
	if err := StopFromState(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
		t.Fatalf("StopFromState signalled pid %d although its cmdline names %s", p.PID(), p.Path())
	case <-time.After(300 * time.Millisecond):
	}
	if s, _ := ReadState(dir); len(s) != 0 {
		t.Errorf("stale record kept: %+v", s)
	}
}

func TestStateStopFromStateOrder(t *testing.T) {
	dir := t.TempDir()
	order := filepath.Join(dir, "order")
	// Each shell appends its name to the order file when SIGTERM arrives; the processes of
	// the controller order take a while, so a later order starting early would show.
	script := func(name, delay string) []string {
		return []string{"-c", `trap 'sleep ` + delay + `; echo ` + name + ` >> "$ORDER_FILE"; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}
	}
	env := []string{"ORDER_FILE=" + order}
	specs := []struct {
		name, delay string
		order       int
	}{
		{"etcd", "0", StopOrderEtcd},
		{"apiserver", "0", StopOrderAPIServer},
		{"scheduler", "0.3", StopOrderControllers},
		{"kcm", "0.3", StopOrderControllers},
		{"component", "0", StopOrderComponent},
	}
	var procs []*Process
	for _, s := range specs {
		log := filepath.Join(dir, s.name+".log")
		p := startTestProcess(t, ProcessOptions{Name: s.name, Path: "/bin/sh", Args: script(s.name, s.delay), Env: env, LogPath: log})
		waitForFile(t, log, "ready")
		if err := AddToState(dir, p, s.order); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	begin := time.Now()
	if err := StopFromState(dir); err != nil {
		t.Fatal(err)
	}
	// The two controllers stop concurrently: well under twice their delay (plus polling).
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("StopFromState took %v", d)
	}
	for _, p := range procs {
		select {
		case <-p.Exited():
		case <-time.After(2 * time.Second):
			t.Errorf("%s (pid %d) still runs after StopFromState", p.Name(), p.PID())
		}
	}
	data, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(data))
	if len(got) != 5 || got[0] != "component" || !slices.Equal(got[3:], []string{"apiserver", "etcd"}) ||
		!slices.Contains(got[1:3], "scheduler") || !slices.Contains(got[1:3], "kcm") {
		t.Errorf("stop order %v, want component, {scheduler, kcm}, apiserver, etcd", got)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file left after StopFromState: %v", err)
	}
}

func TestProcessFailureStopsControlPlane(t *testing.T) {
	bin := t.TempDir()
	// A failing etcd; the other binaries only need to exist.
	scripts := map[string]string{
		"etcd": "#!/bin/sh\nfor i in $(seq 1 30); do echo \"etcd line $i\"; done\necho 'fatal: cannot start etcd' >&2\nexit 1\n",
	}
	for _, b := range requiredBinaries() {
		s, ok := scripts[b]
		if !ok {
			s = "#!/bin/sh\nexit 1\n"
		}
		if err := os.WriteFile(filepath.Join(bin, b), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "lab")
	cp, err := StartControlPlane(t.Context(), ControlPlaneOptions{BinDir: bin, Dir: dir})
	if err == nil {
		_ = cp.Stop()
		t.Fatal("StartControlPlane with a failing etcd succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"etcd", "exited", "fatal: cannot start etcd", "etcd line 30", filepath.Join(dir, "logs", "etcd.log")} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "etcd line 10\n") {
		t.Errorf("error holds more than the log's tail:\n%s", msg)
	}
	if s, err := ReadState(dir); err != nil || len(s) != 0 {
		t.Errorf("state after a failed start: %+v, %v", s, err)
	}

	// Missing binaries are reported with the command that builds them.
	_, err = StartControlPlane(t.Context(), ControlPlaneOptions{BinDir: t.TempDir(), Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "hack/build-tools.sh") {
		t.Errorf("StartControlPlane without binaries: %v", err)
	}
}
