package realnode

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// FileOptions are the settings of a node's configuration files.
type FileOptions struct {
	Name string
	// Dir is the node's directory (Config.Dir); the files go to Dir/etc.
	Dir string
	// NodeIP is the node's address on the lab bridge; PodCIDR its pods' network; ClusterCIDR
	// every node's pods (kube-proxy's clusterCIDR).
	NodeIP, PodCIDR, ClusterCIDR string
	// APIServer is the API server's URL as the node reaches it; CACert the lab CA.
	APIServer, CACert string
	// Client certificates of the kubelet (system:node:<name>) and of kube-proxy, and the
	// kubelet's serving certificate.
	KubeletCert, KubeletKey, ServingCert, ServingKey, ProxyCert, ProxyKey string
	// ClusterDNS is the cluster DNS Service's address; the pods' resolv.conf points there.
	ClusterDNS string
	// Registry is host:port of the lab's registry: every pull of the node goes there.
	Registry string
	// SandboxImage is the pod sandbox ("pause") image.
	SandboxImage string
	// CNIBin holds the bridge, host-local, loopback and portmap plugins; Runc is runc.
	CNIBin, Runc string
	// SizeShown says the node shows its instance type's CPUs (Config.CPUs). The kubelet then
	// runs without QoS cgroups (cgroupsPerQOS: false): on cgroup v1 it would otherwise write every
	// CPU it counts into the cpuset of its kubepods cgroup, which the kernel refuses for CPUs the
	// host lacks. The pods' cgroups are then containerd's, /k8s.io/<id> in the node's cgroup
	// namespace.
	SizeShown bool
	// Labels and Taints the kubelet registers the node with.
	Labels map[string]string
	Taints []corev1.Taint
	// Verbosity is the kubelet's and kube-proxy's -v.
	Verbosity int
}

// Paths of a node's files, relative to its directory.
const (
	containerdConfigFile = "etc/containerd/config.toml"
	kubeletConfigFile    = "etc/kubernetes/kubelet.yaml"
	kubeletKubeconfig    = "etc/kubernetes/kubelet.kubeconfig"
	proxyConfigFile      = "etc/kubernetes/kube-proxy.yaml"
	proxyKubeconfig      = "etc/kubernetes/kube-proxy.kubeconfig"
	resolvConfFile       = "etc/resolv.conf"
	cniConfDir           = "etc/cni/net.d"
	registryHostsDir     = "etc/containerd/certs.d"
	volumePluginDir      = "var/lib/kubelet/volume-plugins"
)

// Files returns the node's configuration files by path relative to o.Dir, and the kubelet's and
// kube-proxy's flags.
func Files(o FileOptions) (files map[string][]byte, kubeletArgs, proxyArgs []string, err error) {
	abs := func(rel string) string { return filepath.Join(o.Dir, rel) }
	files = map[string][]byte{}

	files[containerdConfigFile] = []byte(containerdConfig(o, abs))
	files[filepath.Join(registryHostsDir, "_default", "hosts.toml")] = []byte(fmt.Sprintf(
		"# Every registry is the lab's: no pull leaves the machine.\nserver = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
		o.Registry, o.Registry))

	cni, err := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kube-neuron-lab",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": [][]map[string]string{{{"subnet": o.PodCIDR}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
	if err != nil {
		return nil, nil, nil, err
	}
	files[filepath.Join(cniConfDir, "10-kube-neuron-lab.conflist")] = cni

	// The pods' resolv.conf (dnsPolicy Default, and the search list of ClusterFirst): only the
	// cluster's DNS, so no query goes to the host's resolver.
	files[resolvConfFile] = []byte("nameserver " + o.ClusterDNS + "\n")

	files[kubeletKubeconfig] = kubeconfig(o.APIServer, o.CACert, o.KubeletCert, o.KubeletKey, "system:node:"+o.Name)
	files[proxyKubeconfig] = kubeconfig(o.APIServer, o.CACert, o.ProxyCert, o.ProxyKey, "system:kube-proxy")

	taints := make([]map[string]string, 0, len(o.Taints))
	for _, t := range o.Taints {
		taints = append(taints, map[string]string{"key": t.Key, "value": t.Value, "effect": string(t.Effect)})
	}
	kubelet := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// The machines of the lab run cgroup v1 (hybrid); the kubelet refuses it unless told.
		"failCgroupV1":       false,
		"cgroupDriver":       "cgroupfs",
		"cgroupsPerQOS":      !o.SizeShown,
		"address":            o.NodeIP,
		"port":               10250,
		"readOnlyPort":       0,
		"healthzBindAddress": "127.0.0.1",
		"tlsCertFile":        o.ServingCert,
		"tlsPrivateKeyFile":  o.ServingKey,
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": true},
			"x509":      map[string]string{"clientCAFile": o.CACert},
		},
		"authorization":            map[string]string{"mode": "Webhook"},
		"clusterDNS":               []string{o.ClusterDNS},
		"clusterDomain":            "cluster.local",
		"resolvConf":               abs(resolvConfFile),
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
		"failSwapOn":               false,
		// The lab's nodes share the host's disk and memory: evict only when they are nearly gone.
		"evictionHard":                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"volumePluginDir":             "/" + volumePluginDir,
		"registerWithTaints":          taints,
		"maxPods":                     110,
	}
	if o.SizeShown {
		kubelet["enforceNodeAllocatable"] = []string{}
	}
	data, err := yaml.Marshal(kubelet)
	if err != nil {
		return nil, nil, nil, err
	}
	files[kubeletConfigFile] = data

	proxy := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]string{"kubeconfig": abs(proxyKubeconfig)},
		"hostnameOverride":   o.Name,
		"bindAddress":        o.NodeIP,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"clusterCIDR":        o.ClusterCIDR,
		"mode":               "iptables",
		"detectLocalMode":    "ClusterCIDR",
		// nf_conntrack_max is the host's, not the node's: leave the conntrack sysctls alone.
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
	}
	if data, err = yaml.Marshal(proxy); err != nil {
		return nil, nil, nil, err
	}
	files[proxyConfigFile] = data

	var nodeLabels []string
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		nodeLabels = append(nodeLabels, k+"="+o.Labels[k])
	}
	v := fmt.Sprintf("-v=%d", o.Verbosity)
	kubeletArgs = []string{
		"--config=" + abs(kubeletConfigFile),
		"--kubeconfig=" + abs(kubeletKubeconfig),
		"--hostname-override=" + o.Name,
		"--node-ip=" + o.NodeIP,
		"--node-labels=" + strings.Join(nodeLabels, ","),
		v,
	}
	proxyArgs = []string{"--config=" + abs(proxyConfigFile), v}
	return files, kubeletArgs, proxyArgs, nil
}

// containerdConfig is containerd's configuration: its state in the node's /var and /run, the
// CRI plugin with runc (cgroupfs), the lab's CNI bridge, CDI specs from /var/run/cdi, every
// registry the lab's (registry hosts), the lab's sandbox image, and no plugin that would write
// outside the node (/opt/containerd, NRI) or that the lab does not use.
func containerdConfig(o FileOptions, abs func(string) string) string {
	return fmt.Sprintf(`version = 3
root = '/var/lib/containerd'
state = '/run/containerd'
imports = []
disabled_plugins = [
  'io.containerd.internal.v1.opt',
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
]

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '%s'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '%s'

  [plugins.'io.containerd.cri.v1.runtime']
    # Root here may lack CAP_SYS_RESOURCE: runc must not lower the OOM score adjustment.
    restrict_oom_score_adj = true
    cdi_spec_dirs = ['/var/run/cdi']
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '%s'
      SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['%s']
      conf_dir = '%s'

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
`, o.SandboxImage, abs(registryHostsDir), o.Runc, o.CNIBin, abs(cniConfDir))
}

func kubeconfig(server, ca, cert, key, user string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: lab
  context: {cluster: lab, user: %q}
current-context: lab
`, server, ca, user, cert, key, user))
}

// WriteFiles writes files (Files) under dir.
func WriteFiles(dir string, files map[string][]byte) error {
	for rel, data := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ContainerdConfigPath is the containerd configuration file of the node in dir.
func ContainerdConfigPath(dir string) string { return filepath.Join(dir, containerdConfigFile) }
