package realnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// daemon is one program the node init runs and restarts.
type daemon struct {
	name string
	path string
	args []string
	env  []string
	log  string

	pid     int // 0 while not running
	stopped bool
	started time.Time
}

// RunInit is the node init: it runs as the first process of the node's namespaces (the lab
// starts it), enters the node's cgroup namespace, sets the node up, waits until the host has
// attached the node's network (a line on the descriptor networkFD), then runs containerd, the kubelet and kube-proxy until ctx ends or SIGTERM comes.
// SIGHUP restarts the kubelet, as `systemctl restart kubelet` does. A daemon that exits is
// started again after a second. Every orphan of the node (containerd's shims) is reaped here.
func RunInit(ctx context.Context, configPath string, networkFD uintptr) error {
	logger := klog.FromContext(ctx)
	c, err := ReadConfig(configPath)
	if err != nil {
		return err
	}
	if os.Getenv(stageEnv) != "2" {
		return enterCgroupNamespace(c)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGHUP, unix.SIGTERM, unix.SIGINT)
	if err := unix.Sethostname([]byte(c.Name)); err != nil {
		return fmt.Errorf("set the hostname: %w", err)
	}
	if err := setupMounts(c); err != nil {
		return fmt.Errorf("node %s: %w", c.Name, err)
	}
	if err := joinSystemCgroup(); err != nil {
		return fmt.Errorf("node %s: %w", c.Name, err)
	}
	logger.Info("Node file systems ready; waiting for the network", "node", c.Name)
	// Opened only here: an *os.File of the first stage would close the descriptor when
	// collected, before the second stage reads it.
	network := os.NewFile(networkFD, "network")
	defer network.Close()
	if _, err := bufio.NewReader(network).ReadString('\n'); err != nil {
		return fmt.Errorf("node %s: the host did not attach the network: %w", c.Name, err)
	}
	for k, v := range c.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("node %s: sysctl %s=%s: %w", c.Name, k, v, err)
		}
	}
	path := "PATH=" + filepath.Dir(c.Containerd) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	tmp := filepath.Join(c.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o1777); err != nil {
		return err
	}
	env := []string{path, "HOME=/root", "TMPDIR=" + tmp}
	containerd := &daemon{name: "containerd", path: c.Containerd, args: []string{"--config", c.ContainerdConfig}, env: env,
		log: filepath.Join(c.LogDir, c.Name+"-containerd.log")}
	kubelet := &daemon{name: "kubelet", path: c.Kubelet, args: c.KubeletArgs, env: env, log: filepath.Join(c.LogDir, c.Name+"-kubelet.log")}
	daemons := []*daemon{containerd, kubelet}
	if len(c.KubeProxyArgs) > 0 {
		daemons = append(daemons, &daemon{name: "kube-proxy", path: c.KubeProxy, args: c.KubeProxyArgs, env: env,
			log: filepath.Join(c.LogDir, c.Name+"-kube-proxy.log")})
	}
	if err := containerd.start(); err != nil {
		return err
	}
	if err := waitForSocket(ctx, "/run/containerd/containerd.sock", 30*time.Second); err != nil {
		return fmt.Errorf("node %s: containerd: %w (see %s)", c.Name, err, containerd.log)
	}
	for _, d := range daemons[1:] {
		if err := d.start(); err != nil {
			return err
		}
	}
	logger.Info("Node daemons started", "node", c.Name)

	restart := time.NewTicker(time.Second)
	defer restart.Stop()
	for {
		select {
		case <-ctx.Done():
			return stopAll(daemons, sigs)
		case sig := <-sigs:
			switch sig {
			case unix.SIGCHLD:
				reap(daemons)
			case unix.SIGHUP:
				logger.Info("Restarting the kubelet", "node", c.Name)
				kubelet.stop(sigs, 10*time.Second)
				kubelet.stopped = false
				if err := kubelet.start(); err != nil {
					logger.Error(err, "Starting the kubelet again")
				}
			default:
				return stopAll(daemons, sigs)
			}
		case <-restart.C:
			for _, d := range daemons {
				if d.pid == 0 && !d.stopped && time.Since(d.started) > time.Second {
					logger.Info("Daemon exited; starting it again", "daemon", d.name, "log", d.log)
					if err := d.start(); err != nil {
						logger.Error(err, "Starting a daemon again", "daemon", d.name)
					}
				}
			}
		}
	}
}

func (d *daemon) start() error {
	out, err := os.OpenFile(d.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	p, err := os.StartProcess(d.path, append([]string{d.path}, d.args...), &os.ProcAttr{
		Env:   d.env,
		Files: []*os.File{null, out, out},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	d.pid, d.started = p.Pid, time.Now()
	return p.Release()
}

// stop ends a daemon: SIGTERM to its process group, SIGKILL after grace.
func (d *daemon) stop(sigs <-chan os.Signal, grace time.Duration) {
	d.stopped = true
	if d.pid == 0 {
		return
	}
	_ = unix.Kill(-d.pid, unix.SIGTERM)
	deadline := time.After(grace)
	for d.pid != 0 {
		select {
		case <-deadline:
			_ = unix.Kill(-d.pid, unix.SIGKILL)
			deadline = time.After(grace)
		case <-sigs:
		case <-time.After(100 * time.Millisecond):
		}
		reap([]*daemon{d})
	}
}

// reap collects every child that exited (the daemons and the orphans of the node) and marks the
// daemons that did.
func reap(daemons []*daemon) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		for _, d := range daemons {
			if d.pid == pid {
				d.pid = 0
			}
		}
	}
}

// stopAll stops the kubelet and kube-proxy, then containerd. The node's containers end with the
// node init (the kernel ends its PID namespace).
func stopAll(daemons []*daemon, sigs <-chan os.Signal) error {
	for i := len(daemons) - 1; i >= 0; i-- {
		daemons[i].stop(sigs, 5*time.Second)
	}
	return nil
}

func waitForSocket(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no socket %s after %v", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stageEnv marks the node init once it runs in the node's cgroup namespace.
const stageEnv = "KUBE_NEURON_NODE_INIT_STAGE"

// enterCgroupNamespace creates the node's cgroup (CreateCgroups), moves the node init into it,
// and executes the node init again in a new cgroup namespace, rooted there: the node's programs
// see its cgroup as the root of every hierarchy, as in a node container, so the kubelet's
// kubepods, containerd's and runc's cgroups all stay inside it. The process keeps its pid (1 of
// the node's PID namespace) and its file descriptors (the network pipe).
func enterCgroupNamespace(c Config) error {
	if err := CreateCgroups(c.CgroupRoot); err != nil {
		return err
	}
	hier, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hier {
		if err := os.WriteFile(filepath.Join(h, c.CgroupRoot, "cgroup.procs"), []byte("0"), 0o644); err != nil {
			return fmt.Errorf("move the node init into %s: %w", filepath.Join(h, c.CgroupRoot), err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The new namespace is the calling thread's; execve keeps only that thread.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("a cgroup namespace for the node: %w", err)
	}
	return unix.Exec(self, os.Args, append(os.Environ(), stageEnv+"=2"))
}

// joinSystemCgroup moves the node init (and so the daemons it starts) into /system of the
// node's cgroup in every hierarchy, beside the pods' cgroups.
func joinSystemCgroup() error {
	hier, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hier {
		if err := os.WriteFile(filepath.Join(h, "system", "cgroup.procs"), []byte("0"), 0o644); err != nil {
			return fmt.Errorf("move the node init into %s: %w", filepath.Join(h, "system"), err)
		}
	}
	return nil
}

// ErrNoCgroups says no cgroup hierarchy is mounted under /sys/fs/cgroup.
var ErrNoCgroups = errors.New("no cgroup hierarchy is mounted under /sys/fs/cgroup")

// hierarchies lists the mounted cgroup hierarchies (v1 controllers, name=systemd, the v2
// unified one), from /proc/self/mountinfo.
func hierarchies() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		typ := strings.Fields(post)
		if len(f) < 5 || len(typ) < 1 || (typ[0] != "cgroup" && typ[0] != "cgroup2") {
			continue
		}
		if strings.HasPrefix(f[4], "/sys/fs/cgroup") {
			out = append(out, f[4])
		}
	}
	if len(out) == 0 {
		return nil, ErrNoCgroups
	}
	return out, nil
}
