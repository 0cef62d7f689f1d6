//go:build e2e

package scheduler

import (
	"encoding/json"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// nothingHandler is the do-nothing extender: filter echoes the node names, prioritize scores
// nothing, bind posts the Binding. It decodes the same request bodies our extender decodes, so
// the difference to ours is what ours does with them.
func nothingHandler(client kubernetes.Interface) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, &extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames})
	})
	mux.HandleFunc("/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, &extenderv1.HostPriorityList{})
	})
	mux.HandleFunc("/bind", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderBindingArgs
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res := &extenderv1.ExtenderBindingResult{}
		err := client.CoreV1().Pods(args.PodNamespace).Bind(r.Context(), &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
		}, metav1.CreateOptions{})
		if err != nil {
			res.Error = err.Error()
		}
		writeJSON(w, res)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
