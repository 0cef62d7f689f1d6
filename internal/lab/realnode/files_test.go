package realnode

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func options(sizeShown bool) FileOptions {
	return FileOptions{
		Name: "trn1-a", Dir: "/lab/nodes/trn1-a/node", NodeIP: "10.200.0.3", PodCIDR: "10.244.2.0/24", ClusterCIDR: "10.244.0.0/16",
		APIServer: "https://10.200.0.1:6443", CACert: "/lab/pki/ca.crt", KubeletCert: "/lab/pki/node.crt", KubeletKey: "/lab/pki/node.key",
		ServingCert: "/lab/pki/serving.crt", ServingKey: "/lab/pki/serving.key", ProxyCert: "/lab/pki/proxy.crt", ProxyKey: "/lab/pki/proxy.key",
		ClusterDNS: "10.0.0.10", Registry: "10.200.0.1:5000", SandboxImage: "docker.io/kube-neuron-lab/pause:0.1.0",
		CNIBin: "/cache/node/bin", Runc: "/cache/node/bin/runc", SizeShown: sizeShown,
		Labels: map[string]string{"node.kubernetes.io/instance-type": "trn1.32xlarge", "kube-neuron.io/lab-kubelet": "real"},
		Taints: []corev1.Taint{{Key: "aws.amazon.com/neuron", Value: "true", Effect: corev1.TaintEffectNoSchedule}},
	}
}

// TestFiles checks what the node's configuration says: the kubelet's (cgroup v1, the lab's
// certificates and DNS, the Neuron taint; no QoS cgroups where the node shows its instance
// type's CPUs), containerd's (every pull to the lab's registry, CDI, runc), CNI's and
// kube-proxy's.
func TestFiles(t *testing.T) {
	for _, sizeShown := range []bool{true, false} {
		files, kubeletArgs, proxyArgs, err := Files(options(sizeShown))
		if err != nil {
			t.Fatal(err)
		}
		var kubelet map[string]any
		if err := yaml.Unmarshal(files[kubeletConfigFile], &kubelet); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]any{
			"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": !sizeShown, "address": "10.200.0.3",
			"resolvConf": "/lab/nodes/trn1-a/node/etc/resolv.conf", "tlsCertFile": "/lab/pki/serving.crt",
			"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		} {
			if kubelet[k] != want {
				t.Errorf("sizeShown %t: kubelet %s = %v, want %v", sizeShown, k, kubelet[k], want)
			}
		}
		if dns, _ := kubelet["clusterDNS"].([]any); len(dns) != 1 || dns[0] != "10.0.0.10" {
			t.Errorf("clusterDNS %v", kubelet["clusterDNS"])
		}
		if taints, _ := kubelet["registerWithTaints"].([]any); len(taints) != 1 || !strings.Contains(string(files[kubeletConfigFile]), "aws.amazon.com/neuron") {
			t.Errorf("registerWithTaints %v", kubelet["registerWithTaints"])
		}
		if _, ok := kubelet["enforceNodeAllocatable"]; ok != sizeShown {
			t.Errorf("sizeShown %t: enforceNodeAllocatable %v", sizeShown, kubelet["enforceNodeAllocatable"])
		}
		if !strings.Contains(strings.Join(kubeletArgs, " "), "--node-labels=kube-neuron.io/lab-kubelet=real,node.kubernetes.io/instance-type=trn1.32xlarge") {
			t.Errorf("kubelet args %v", kubeletArgs)
		}
		if string(files[resolvConfFile]) != "nameserver 10.0.0.10\n" {
			t.Errorf("resolv.conf %q: only the cluster's DNS", files[resolvConfFile])
		}
		hosts := string(files["etc/containerd/certs.d/_default/hosts.toml"])
		if !strings.Contains(hosts, `server = "http://10.200.0.1:5000"`) {
			t.Errorf("hosts.toml %q does not send every pull to the lab's registry", hosts)
		}
		ctd := string(files[containerdConfigFile])
		for _, want := range []string{"restrict_oom_score_adj = true", "cdi_spec_dirs = ['/var/run/cdi']", "BinaryName = '/cache/node/bin/runc'",
			"sandbox = 'docker.io/kube-neuron-lab/pause:0.1.0'", "'io.containerd.internal.v1.opt'", "'io.containerd.nri.v1.nri'"} {
			if !strings.Contains(ctd, want) {
				t.Errorf("containerd config lacks %s", want)
			}
		}
		if cni := string(files["etc/cni/net.d/10-kube-neuron-lab.conflist"]); !strings.Contains(cni, `"subnet": "10.244.2.0/24"`) || !strings.Contains(cni, `"ipMasq": false`) {
			t.Errorf("CNI config %s", cni)
		}
		if !strings.Contains(string(files[proxyConfigFile]), "maxPerCore: 0") || len(proxyArgs) != 2 {
			t.Errorf("kube-proxy: %s %v", files[proxyConfigFile], proxyArgs)
		}
	}
}

func TestCheckPathsRefusesWhatTheNodeHides(t *testing.T) {
	c := Config{Name: "n", Dir: "/work/lab/nodes/n/node", LogDir: "/work/lab/logs", Kubelet: "/cache/kubelet", Containerd: "/cache/containerd", CgroupRoot: "/x"}
	if err := checkPaths(c); err != nil {
		t.Fatal(err)
	}
	c.Dir = "/var/lib/lab/nodes/n/node"
	if err := checkPaths(c); err == nil || !strings.Contains(err.Error(), "under /var") {
		t.Fatalf("a node directory under /var: %v", err)
	}
}
