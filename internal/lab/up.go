package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/lab/realnode"
)

// Files a running lab keeps in its directory.
const (
	// ReadyFile appears when a lab started by Serve is ready; it holds a ReadyInfo.
	ReadyFile = "ready.json"
	// PIDFile holds the pid of the Serve process.
	PIDFile = "lab.pid"
	// ServeLog is the Serve process's own log.
	ServeLog = "lab.log"
)

// ReadyInfo describes a running lab.
type ReadyInfo struct {
	Kubeconfig string   `json:"kubeconfig"`
	Kubectl    string   `json:"kubectl"`
	Server     string   `json:"server"`
	Nodes      []string `json:"nodes"`
	StartedIn  string   `json:"startedIn"`
	// Chart says which release of the chart helm installed, "" when none.
	Chart string `json:"chart,omitempty"`
	// Components are the components the lab was asked to run (Options.Components).
	Components []string `json:"components,omitempty"`
}

// Serve starts a lab in o.Dir, writes o.Dir/bin/kubectl and the ready file, and runs until ctx
// ends; then it stops everything it started.
func Serve(ctx context.Context, o Options) error {
	begin := time.Now()
	if err := os.WriteFile(filepath.Join(o.Dir, PIDFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(o.Dir, PIDFile))
	l, err := Start(ctx, o)
	if err != nil {
		return err
	}
	defer os.Remove(filepath.Join(o.Dir, ReadyFile))
	info := ReadyInfo{Kubeconfig: l.Kubeconfig(), Server: l.RESTConfig().Host, StartedIn: time.Since(begin).Round(time.Millisecond).String(),
		Components: o.Components}
	if o.Chart != nil {
		info.Chart = "helm release " + ChartRelease + " of " + o.Chart.Chart
	}
	for _, n := range l.Nodes() {
		info.Nodes = append(info.Nodes, n.Name)
	}
	binDir := filepath.Join(o.Dir, "bin")
	info.Kubectl = filepath.Join(binDir, "kubectl")
	err = os.MkdirAll(binDir, 0o755)
	if err == nil {
		_ = os.Remove(info.Kubectl)
		err = os.Symlink(filepath.Join(o.BinDir, "kubectl"), info.Kubectl)
	}
	if err == nil {
		var data []byte
		data, err = json.MarshalIndent(info, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(o.Dir, ReadyFile), data, 0o644)
		}
	}
	if err != nil {
		return errors.Join(err, l.Stop())
	}
	klog.FromContext(ctx).Info("Lab ready", "kubeconfig", info.Kubeconfig, "nodes", info.Nodes, "duration", info.StartedIn)
	<-ctx.Done()
	klog.FromContext(ctx).Info("Stopping the lab")
	return l.Stop()
}

// UpOptions configure Up.
type UpOptions struct {
	Dir, BinDir, FleetFile string
	Manifests, Components  []string
	// Extra are more arguments of `serve` (real nodes, the chart).
	Extra []string
	// Self is the lab binary; Up runs `Self serve ...` in the background.
	Self string
	// Timeout bounds the wait for the lab to become ready.
	Timeout time.Duration
}

// Up stops a lab running in o.Dir, starts a new one in the background and returns its ReadyInfo
// once it is ready; the lab keeps running after Up returns (Down stops it).
func Up(ctx context.Context, o UpOptions) (*ReadyInfo, error) {
	if err := Down(o.Dir); err != nil {
		return nil, fmt.Errorf("stopping the lab that runs in %s: %w", o.Dir, err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(o.Dir, ReadyFile))
	args := []string{"serve", "--dir", o.Dir, "--bin-dir", o.BinDir}
	if o.FleetFile != "" {
		args = append(args, "--fleet", o.FleetFile)
	}
	for _, m := range o.Manifests {
		args = append(args, "--apply", m)
	}
	args = append(args, "--components", strings.Join(o.Components, ","))
	args = append(args, o.Extra...)
	p, err := StartProcess(ProcessOptions{Name: "lab", Path: o.Self, Args: args, LogPath: filepath.Join(o.Dir, ServeLog), Detach: true})
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 6 * time.Minute
	}
	deadline := time.After(timeout)
	for {
		if data, err := os.ReadFile(filepath.Join(o.Dir, ReadyFile)); err == nil {
			var info ReadyInfo
			if err := json.Unmarshal(data, &info); err != nil {
				return nil, err
			}
			return &info, nil
		}
		select {
		case <-p.Exited():
			return nil, fmt.Errorf("the lab exited before it was ready: %v\n%s", p.ExitError(), LogTail(filepath.Join(o.Dir, ServeLog), 30))
		case <-deadline:
			_ = Down(o.Dir)
			return nil, fmt.Errorf("the lab was not ready after %v; its log:\n%s", timeout, LogTail(filepath.Join(o.Dir, ServeLog), 30))
		case <-ctx.Done():
			_ = Down(o.Dir)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Down stops the lab recorded in dir: the Serve process first (it stops the control plane in
// order), then any process it left behind. A directory without a lab is not an error.
func Down(dir string) error {
	_, err := StopLab(dir)
	return err
}

// Stopped says what StopLab stopped.
type Stopped struct {
	Dir string
	// PID is the lab's own process (`neuron-lab serve`), 0 when none ran.
	PID int
	// Ready is what the lab wrote once it was ready; nil when none ran or it was still starting.
	Ready *ReadyInfo
	// Nodes are the fleet's nodes and those the lab adopted (the autoscaler's).
	Nodes []string
	// Left are the processes of the lab that still ran once its own process was gone (after a
	// `kill -9` of the lab, or when its own stop failed), which StopLab stopped.
	Left []State
}

// Nothing reports whether no lab ran in the directory.
func (s *Stopped) Nothing() bool { return s.PID == 0 && len(s.Left) == 0 }

// String says what was stopped, or that nothing ran.
func (s *Stopped) String() string {
	var b strings.Builder
	switch {
	case s.Nothing():
		return fmt.Sprintf("no lab runs in %s: nothing to stop", s.Dir)
	case s.PID == 0:
		fmt.Fprintf(&b, "no lab process ran in %s, but it had left processes behind", s.Dir)
	case s.Ready == nil:
		fmt.Fprintf(&b, "stopped the lab in %s (pid %d), which was still starting", s.Dir, s.PID)
	default:
		nodes := "none"
		if len(s.Nodes) > 0 {
			nodes = strings.Join(s.Nodes, ", ")
		}
		fmt.Fprintf(&b, "stopped the lab in %s (pid %d): nodes %s", s.Dir, s.PID, nodes)
		if len(s.Ready.Components) > 0 {
			fmt.Fprintf(&b, "; components %s", strings.Join(s.Ready.Components, ", "))
		}
		b.WriteString("; the control plane")
	}
	if len(s.Left) > 0 {
		names := make([]string, len(s.Left))
		for i, e := range s.Left {
			names[i] = fmt.Sprintf("%s (pid %d)", e.Name, e.PID)
		}
		fmt.Fprintf(&b, "\nstopped %d processes left behind: %s", len(s.Left), strings.Join(names, ", "))
	}
	return b.String()
}

// StopLab is Down, and says what it stopped.
func StopLab(dir string) (*Stopped, error) {
	var errs []error
	st := &Stopped{Dir: dir}
	if data, err := os.ReadFile(filepath.Join(dir, PIDFile)); err == nil {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		if pid > 1 && isLabServe(pid) {
			st.PID = pid
			st.Ready = readReady(dir)
			if st.Ready != nil {
				st.Nodes = slices.Clone(st.Ready.Nodes)
			}
			// Nodes the lab adopted are named by their components' (and real nodes') processes.
			entries, _ := ReadState(dir)
			for _, e := range entries {
				if n := processNode(e.Name); n != "" && !slices.Contains(st.Nodes, n) && pidRuns(e.PID, e.Path) {
					st.Nodes = append(st.Nodes, n)
				}
			}
			_ = syscall.Kill(pid, syscall.SIGTERM)
			deadline := time.Now().Add(40 * time.Second)
			for isLabServe(pid) && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if isLabServe(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(filepath.Join(dir, PIDFile))
	}
	left, err := stopFromState(dir)
	st.Left = left
	errs = append(errs, err)
	// A lab killed with SIGKILL leaves its real nodes' cgroups (their processes died with the
	// nodes' inits): remove those of every lab whose process is gone.
	if err := realnode.RemoveStaleCgroups(20 * time.Second); err != nil && !errors.Is(err, realnode.ErrNoCgroups) {
		errs = append(errs, err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "socket-dir")); err == nil {
		if sd := strings.TrimSpace(string(data)); strings.HasPrefix(sd, "/tmp/kn-") {
			errs = append(errs, os.RemoveAll(sd))
		}
	}
	_ = os.Remove(filepath.Join(dir, ReadyFile))
	return st, errors.Join(errs...)
}

// processNode is the node a recorded process serves (a node's component, a real node's init),
// "" for the lab's other processes.
func processNode(name string) string {
	for _, prefix := range []string{ComponentDevicePlugin + "-", ComponentDRADriver + "-", "node-"} {
		if n, ok := strings.CutPrefix(name, prefix); ok {
			return n
		}
	}
	return ""
}

// readReady reads the ready file of dir; nil when there is none (or it cannot be read).
func readReady(dir string) *ReadyInfo {
	data, err := os.ReadFile(filepath.Join(dir, ReadyFile))
	if err != nil {
		return nil
	}
	var info ReadyInfo
	if json.Unmarshal(data, &info) != nil {
		return nil
	}
	return &info
}

// isLabServe reports whether pid runs `... serve --dir ...` of a lab binary.
func isLabServe(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(data), "\x00")
	return len(args) > 1 && args[1] == "serve"
}
