package netns

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireRealNodes fails the test when the machine cannot make namespaces, unless
// KUBE_NEURON_REAL_NODES=0 opts out of everything that needs them.
func requireRealNodes(t *testing.T) Tools {
	t.Helper()
	if os.Getenv("KUBE_NEURON_REAL_NODES") == "0" {
		t.Skip("KUBE_NEURON_REAL_NODES=0: the lab network needs root and network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the lab network needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) to create network namespaces; run as root, or set KUBE_NEURON_REAL_NODES=0 to opt out")
	}
	tools, err := FindTools()
	if err != nil {
		t.Fatalf("%v; or set KUBE_NEURON_REAL_NODES=0 to opt out", err)
	}
	return tools
}

func TestRelayReachesAListenerInsideTheNamespaceOnly(t *testing.T) {
	tools := requireRealNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, tools)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()

	l, err := n.Listen("tcp", Gateway.String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("echo " + line))
			}()
		}
	}()
	// The listener is not on the host: nothing answers at its address there.
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("the host reached %s, which listens inside the lab namespace", l.Addr())
	}
	addr, err := n.Relay(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("relay listens on %s, want 127.0.0.1", addr)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || got != "echo hello\n" {
		t.Fatalf("through the relay: %q, %v", got, err)
	}

	// No route leads out of the namespace: only the bridge's subnet, no default route.
	out, err := exec.Command(tools.Nsenter, "--net="+n.Path(), "--", tools.IP, "-4", "route", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "default") || !strings.Contains(string(out), Subnet.String()) {
		t.Fatalf("routes of the lab namespace:\n%s", out)
	}
	// A host listener on loopback is out of reach from inside.
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	if c, err := n.Dial(ctx, "tcp", hl.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("the lab namespace reached the host's %s", hl.Addr())
	}
}

func TestAddresses(t *testing.T) {
	if got := NodeIP(1).String(); got != "10.200.0.2" {
		t.Fatalf("NodeIP(1) = %s", got)
	}
	if got := PodCIDR(3).String(); got != "10.244.3.0/24" {
		t.Fatalf("PodCIDR(3) = %s", got)
	}
	if !Subnet.Contains(NodeIP(MaxNodes)) {
		t.Fatalf("NodeIP(MaxNodes) = %s is outside %s", NodeIP(MaxNodes), Subnet)
	}
}
