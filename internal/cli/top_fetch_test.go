package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestProxyFetcher: the request goes to the pod proxy with the port's number (the API server
// does not resolve a pod's port names) and asks for the text format; a 403 reads as Forbidden;
// an answer larger than the limit is refused.
func TestProxyFetcher(t *testing.T) {
	var gotPath, gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAccept = r.URL.Path, r.Header.Get("Accept")
		switch r.URL.Path {
		case "/api/v1/namespaces/kube-system/pods/dp:9464/proxy/metrics":
			w.Write([]byte("neuron_node_devices{node=\"n\",state=\"free\"} 1\n"))
		case "/api/v1/namespaces/kube-system/pods/big:9464/proxy/metrics":
			w.Write([]byte(strings.Repeat("#\n", maxMetricsBytes/2+1)))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"pods \"x\" is forbidden: User \"u\" cannot get resource \"pods/proxy\""}`))
		}
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	f := proxyFetcher{client: client}
	ctx := context.Background()
	data, err := f.fetchMetrics(ctx, agentPod{Namespace: "kube-system", Name: "dp", Port: 9464})
	if err != nil || !strings.HasPrefix(string(data), "neuron_node_devices") {
		t.Errorf("%q, %v (path %s)", data, err, gotPath)
	}
	if !strings.HasPrefix(gotAccept, "text/plain") {
		t.Errorf("Accept %q: want the text format", gotAccept)
	}
	if _, err := f.fetchMetrics(ctx, agentPod{Namespace: "kube-system", Name: "x", Port: 9464}); !apierrors.IsForbidden(err) {
		t.Errorf("403: %v is not Forbidden", err)
	}
	if _, err := f.fetchMetrics(ctx, agentPod{Namespace: "kube-system", Name: "big", Port: 9464}); err == nil || !strings.Contains(err.Error(), "larger than 32 MiB") {
		t.Errorf("a large answer: %v", err)
	}
}
