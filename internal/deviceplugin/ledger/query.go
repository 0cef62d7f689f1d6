package ledger

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// Query is what a kubelet call brings to the ledger besides its own arguments.
type Query struct {
	// Pods are the node's pods as the informer has them.
	Pods []Pod
	// Lookup reads what the informer's pods cannot tell, when a decision needs it.
	Lookup Lookup
	// Records says a call is served from a matching record when there is one (allocation
	// source auto or extender); RequireRecord that a call without one fails (extender).
	Records, RequireRecord bool
	Now                    time.Time
	Log                    logr.Logger
}

// Note logs a decision detail at V(2).
func (q Query) Note(msg string, kv ...any) { q.Log.V(2).Info(msg, kv...) }

// Lookup answers the questions a call may have to ask the API server or the kubelet: the plugin
// asks them, a test answers them from its model.
type Lookup interface {
	Lister
	// Gone reports whether the API server no longer has the pod with uid under its name, or has
	// it finished; false when it cannot tell.
	Gone(pod PodKey, uid types.UID) bool
	// KubeletHolder names the pod the kubelet's PodResources show holding exactly ids of
	// resource, or the zero key.
	KubeletHolder(resource string, ids []string) PodKey
}
