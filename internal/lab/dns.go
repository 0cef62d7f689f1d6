package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-neuron/kube-neuron/internal/lab/registry"
)

// clusterDNSManifest is CoreDNS as the lab runs it on its system node: the kubernetes plugin for
// cluster.local and the reverse zones, and nothing else. There is no forward plugin: a name
// outside the cluster gets no answer, and no query leaves the lab. The kubelets' clusterDNS is
// its Service's address, ClusterDNSIP.
const clusterDNSManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      nodeSelector: {"kube-neuron.io/lab-system": "true"}
      containers:
      - name: coredns
        image: registry.k8s.io/coredns/coredns:%s
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %s
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`

// startClusterDNS applies CoreDNS (clusterDNSManifest) with the tag of the lab's image.
func (l *Lab) startClusterDNS(ctx context.Context) error {
	tag, err := registry.Tag(filepath.Join(l.opts.LabImagesDir, "coredns.tar"))
	if err != nil {
		return fmt.Errorf("the CoreDNS image: %w", err)
	}
	path := filepath.Join(l.cp.Dir(), "config", "coredns.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, clusterDNSManifest, tag, ClusterDNSIP), 0o644); err != nil {
		return err
	}
	_, err = ApplyFile(ctx, l.cp.RESTConfig(), "kube-neuron-lab", path, metav1.NamespaceSystem)
	return err
}
