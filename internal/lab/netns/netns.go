// Package netns is the lab's private network for real nodes: a network namespace that the lab
// creates (the "lab namespace"), holding the control plane and a bridge that every real node's
// own network namespace is attached to by a veth pair. Nothing in it has a route or NAT to the
// outside; the host reaches the API server only through a relay on 127.0.0.1 (Relay).
//
// Addresses: the bridge is Gateway in Subnet; real node i (from 1) is NodeIP(i) and its pods
// use PodCIDR(i), routed through the lab namespace.
//
// The namespace lives as long as a process is in it: a holder process (sleep) started with its
// own network namespace, which dies with the lab (parent-death signal), so a killed lab leaves no
// namespace, bridge or veth behind.
package netns

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Addresses of the lab network.
var (
	// Subnet is the lab bridge's network: the gateway and the real nodes.
	Subnet = netip.MustParsePrefix("10.200.0.0/24")
	// Gateway is the bridge's address in the lab namespace, where the control plane listens.
	Gateway = netip.MustParseAddr("10.200.0.1")
	// PodNetwork holds every real node's pod CIDR (kube-proxy's clusterCIDR).
	PodNetwork = netip.MustParsePrefix("10.244.0.0/16")
)

// BridgeName is the lab namespace's bridge.
const BridgeName = "kn-lab0"

// MaxNodes is how many real nodes the lab network holds (Subnet less the gateway).
const MaxNodes = 250

// NodeIP is the address of real node i (1 <= i <= MaxNodes) on the lab bridge.
func NodeIP(i int) netip.Addr {
	b := Gateway.As4()
	b[3] = byte(1 + i)
	return netip.AddrFrom4(b)
}

// PodCIDR is real node i's pod network, 10.244.<i>.0/24.
func PodCIDR(i int) netip.Prefix {
	b := PodNetwork.Addr().As4()
	b[2] = byte(i)
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// Tools are the host programs the network needs: nsenter (util-linux) to run a program inside a
// namespace and ip (iproute2) to configure links.
type Tools struct {
	Nsenter, IP, Sleep string
}

// FindTools looks the tools up in PATH (and /usr/sbin, /sbin).
func FindTools() (Tools, error) {
	var t Tools
	var missing []string
	for _, e := range []struct {
		name string
		dst  *string
		pkg  string
	}{{"nsenter", &t.Nsenter, "util-linux"}, {"ip", &t.IP, "iproute2"}, {"sleep", &t.Sleep, "coreutils"}} {
		p, err := exec.LookPath(e.name)
		if err != nil {
			for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
				if fi, serr := os.Stat(dir + "/" + e.name); serr == nil && fi.Mode()&0o111 != 0 {
					p, err = dir+"/"+e.name, nil
					break
				}
			}
		}
		if err != nil {
			missing = append(missing, e.name+" (Debian package "+e.pkg+")")
			continue
		}
		*e.dst = p
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("real lab nodes need %s", strings.Join(missing, ", "))
	}
	return t, nil
}

// Network is a running lab namespace.
type Network struct {
	tools  Tools
	holder *exec.Cmd
	path   string   // /proc/<holder>/ns/net
	ns     *os.File // keeps the namespace open for Dial

	mu      sync.Mutex
	stopped bool
}

// Start creates the lab namespace: loopback up, the bridge with Gateway, forwarding on (inside
// the namespace only). The holder dies with the calling process.
func Start(ctx context.Context, tools Tools) (*Network, error) {
	holder := exec.Command(tools.Sleep, "infinity")
	holder.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := holder.Start(); err != nil {
		return nil, fmt.Errorf("create the lab network namespace (needs root: CAP_SYS_ADMIN): %w", err)
	}
	n := &Network{tools: tools, holder: holder, path: fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)}
	go func() { _ = holder.Wait() }()
	var err error
	if n.ns, err = os.Open(n.path); err != nil {
		n.Stop()
		return nil, fmt.Errorf("open the lab network namespace: %w", err)
	}
	steps := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", netip.PrefixFrom(Gateway, Subnet.Bits()).String(), "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
	}
	for _, s := range steps {
		if err := n.IP(ctx, s...); err != nil {
			n.Stop()
			return nil, err
		}
	}
	if err := n.Sysctl(ctx, "net/ipv4/ip_forward", "1"); err != nil {
		n.Stop()
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Lab network namespace ready", "holder", holder.Process.Pid, "bridge", BridgeName, "gateway", Gateway)
	return n, nil
}

// Path is the namespace's file (/proc/<pid>/ns/net), for nsenter --net.
func (n *Network) Path() string { return n.path }

// HolderPID is the pid of the process that holds the namespace.
func (n *Network) HolderPID() int { return n.holder.Process.Pid }

// Wrap returns the command line that runs path with args inside the lab namespace.
func (n *Network) Wrap(path string, args ...string) (string, []string) {
	return n.tools.Nsenter, append([]string{"--net=" + n.path, "--", path}, args...)
}

// IP runs ip(8) with args inside the lab namespace.
func (n *Network) IP(ctx context.Context, args ...string) error {
	return run(ctx, n.tools.Nsenter, append([]string{"--net=" + n.path, "--", n.tools.IP}, args...)...)
}

// Sysctl writes a sysctl of the lab namespace (key as a path under /proc/sys).
func (n *Network) Sysctl(ctx context.Context, key, value string) error {
	return SysctlIn(ctx, n.tools, n.path, key, value)
}

// SysctlIn writes a per-namespace sysctl of the network namespace at nsPath.
func SysctlIn(ctx context.Context, tools Tools, nsPath, key, value string) error {
	if strings.Contains(key, "..") {
		return fmt.Errorf("sysctl %q", key)
	}
	// /proc/sys/net shows the namespace of the process that opens it: write from inside.
	return run(ctx, tools.Nsenter, "--net="+nsPath, "--", "/bin/sh", "-c", `printf '%s' "$1" > "/proc/sys/$2"`, "sh", value, key)
}

// AttachNode connects the network namespace of process pid (a real node's) to the lab bridge:
// a veth pair, eth0 inside the node with NodeIP(index), routes to the lab and to the pod and
// service networks through the lab namespace, and a route in the lab namespace to the node's
// PodCIDR(index). serviceCIDR is the API server's --service-cluster-ip-range.
func (n *Network) AttachNode(ctx context.Context, pid, index int, serviceCIDR string) error {
	if index < 1 || index > MaxNodes {
		return fmt.Errorf("real node index %d is outside 1..%d", index, MaxNodes)
	}
	hostSide := "kn-node" + strconv.Itoa(index)
	nodeNS := fmt.Sprintf("/proc/%d/ns/net", pid)
	ip := NodeIP(index)
	if err := n.IP(ctx, "link", "add", hostSide, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)); err != nil {
		return err
	}
	for _, s := range [][]string{
		{"link", "set", hostSide, "master", BridgeName},
		{"link", "set", hostSide, "up"},
		{"route", "replace", PodCIDR(index).String(), "via", ip.String()},
	} {
		if err := n.IP(ctx, s...); err != nil {
			return err
		}
	}
	inNode := func(args ...string) error {
		return run(ctx, n.tools.Nsenter, append([]string{"--net=" + nodeNS, "--", n.tools.IP}, args...)...)
	}
	for _, s := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", netip.PrefixFrom(ip, Subnet.Bits()).String(), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", PodNetwork.String(), "via", Gateway.String()},
		{"route", "add", serviceCIDR, "via", Gateway.String()},
	} {
		if err := inNode(s...); err != nil {
			return err
		}
	}
	return nil
}

// DetachNode removes a node's route and its veth (gone anyway with the node's namespace).
func (n *Network) DetachNode(ctx context.Context, index int) {
	_ = n.IP(ctx, "route", "del", PodCIDR(index).String())
	_ = n.IP(ctx, "link", "del", "kn-node"+strconv.Itoa(index))
}

// Dial connects to address (host:port inside the lab namespace) from the calling process: the
// socket is made on a thread switched into the namespace for that moment.
func (n *Network) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens on address inside the lab namespace.
func (n *Network) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.inside(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// inside runs fn on an OS thread of its own switched into the lab namespace: the sockets fn
// makes belong to the namespace, and stay there once the thread is back.
func (n *Network) inside(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is given back only when it is back in the host's namespace; otherwise it
		// ends with this goroutine.
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(n.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the lab network namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// Relay listens on 127.0.0.1 of the host (a free port) and forwards every connection to target
// inside the lab namespace, until ctx ends. It returns the host address.
func (n *Network) Relay(ctx context.Context, target string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("relay to %s: %w", target, err)
	}
	logger := klog.FromContext(ctx)
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				up, err := n.Dial(dctx, "tcp", target)
				cancel()
				if err != nil {
					logger.V(2).Info("Relay cannot reach its target", "target", target, "err", err)
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					if tc, ok := dst.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
					done <- struct{}{}
				}
				go pipe(up, c)
				go pipe(c, up)
				select {
				case <-done:
					<-done
				case <-ctx.Done():
				}
			}()
		}
	}()
	return l.Addr().String(), nil
}

// Stop kills the holder; the namespace goes once the processes inside it have ended.
func (n *Network) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	n.stopped = true
	if n.ns != nil {
		n.ns.Close()
	}
	_ = n.holder.Process.Kill()
}

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
