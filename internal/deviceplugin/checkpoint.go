package deviceplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kube-neuron/kube-neuron/internal/allocation"
	"github.com/kube-neuron/kube-neuron/internal/deviceplugin/ledger"
	"github.com/kube-neuron/kube-neuron/internal/topology"
)

// CheckpointFile is the file in Options.StateDir that keeps Allocate's answers.
//
// An answer is the one thing the plugin knows that nobody else does: which hardware a container
// got for the kubelet's ids. The kubelet's PodResources show the ids, and the container's
// allocation record says the hardware only once a refresh has written it; when the kubelet admits
// pods in another order than their records were matched, the two differ until then. A plugin that
// restarted in between would take the ids for the hardware, so every answer is written here before
// it is given, and read back at start. The kubelet's device-plugins directory cannot hold it: the
// kubelet empties that directory when it starts.
const CheckpointFile = "checkpoint.json"

// checkpointVersion is the version of the checkpoint's format this plugin writes and reads.
const checkpointVersion = 1

// checkpoint is the file's content.
type checkpoint struct {
	Version      int                `json:"version"`
	Node         string             `json:"node"`
	InstanceType string             `json:"instanceType"`
	LNC          int                `json:"lnc"`
	Answers      []checkpointAnswer `json:"answers"`
}

// checkpointAnswer is one ledger.Answer.
type checkpointAnswer struct {
	Resource   string    `json:"resource"`
	KubeletIDs []string  `json:"kubeletIDs"`
	Devices    []int     `json:"devices"`
	Cores      []int     `json:"cores"`
	PodUID     string    `json:"podUID,omitempty"`
	Pod        string    `json:"pod,omitempty"` // namespace/name
	Container  string    `json:"container,omitempty"`
	At         time.Time `json:"at"`
	Seen       bool      `json:"seen,omitempty"` // the kubelet's PodResources showed the ids
}

// checkpointPath is the checkpoint's path, or "" when the plugin keeps no checkpoint.
func (p *Plugin) checkpointPath() string {
	if p.o.StateDir == "" {
		return ""
	}
	return filepath.Join(p.o.StateDir, CheckpointFile)
}

// encodeCheckpoint encodes the answers, in key order.
func encodeCheckpoint(node string, shape *topology.Shape, answers map[ledger.AnswerKey]ledger.Answer) ([]byte, error) {
	c := checkpoint{Version: checkpointVersion, Node: node, InstanceType: shape.Type.Name, LNC: shape.LNC, Answers: []checkpointAnswer{}}
	keys := slices.Collect(maps.Keys(answers))
	slices.SortFunc(keys, func(a, b ledger.AnswerKey) int {
		return strings.Compare(a.Resource+"|"+a.IDs, b.Resource+"|"+b.IDs)
	})
	for _, k := range keys {
		a := answers[k]
		c.Answers = append(c.Answers, checkpointAnswer{
			Resource: a.Resource, KubeletIDs: a.Kubelet, Devices: a.Hardware.Devices, Cores: a.Hardware.Cores,
			PodUID: string(a.PodUID), Pod: podName(a.Pod), Container: a.Container, At: a.At.UTC(), Seen: a.Seen,
		})
	}
	return json.MarshalIndent(c, "", "  ")
}

// podName is namespace/name, or "" for no pod.
func podName(k ledger.PodKey) string {
	if k.IsZero() {
		return ""
	}
	return k.String()
}

// saveCheckpointLocked writes the ledger's answers to the checkpoint when they changed since the
// last write. The file is replaced by a rename, so a reader sees the old or the new content,
// never a mix. It is not synced: the page cache outlives the plugin's process, and a node that
// loses it (a kernel crash, a power cut) restarts its containers, whose answers are then given
// anew. The caller holds p.mu.
func (p *Plugin) saveCheckpointLocked() error {
	path := p.checkpointPath()
	if path == "" {
		return nil
	}
	data, err := encodeCheckpoint(p.o.NodeName, p.shape, p.ledger.Answers())
	if err != nil {
		return err
	}
	if bytes.Equal(data, p.savedCheckpoint) {
		return nil
	}
	tmp, err := os.CreateTemp(p.o.StateDir, "."+CheckpointFile+".*")
	if err != nil {
		return fmt.Errorf("writing the checkpoint %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing the checkpoint %s: %w", path, err)
	}
	p.savedCheckpoint = data
	return nil
}

// loadCheckpoint reads the answers a previous run of the plugin on this node gave. A checkpoint
// of another node or instance shape is ignored, and one that cannot be read is moved aside to
// <file>.invalid: either way the plugin starts with no answers, as it did before it kept any.
func (p *Plugin) loadCheckpoint(ctx context.Context) error {
	path := p.checkpointPath()
	if path == "" {
		return nil
	}
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(p.o.StateDir, 0o700); err != nil {
		return fmt.Errorf("creating the state directory %s (--state-dir): %w", p.o.StateDir, err)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the checkpoint %s: %w", path, err)
	}
	served, err := parseCheckpoint(data, p.o.NodeName, p.shape)
	var other *otherNodeError
	switch {
	case errors.As(err, &other):
		logger.Info("Ignoring the checkpoint of another node or instance shape; it is replaced at the next Allocate", "path", path, "reason", other.Error())
		return nil
	case err != nil:
		bad := path + ".invalid"
		if rerr := os.Rename(path, bad); rerr != nil {
			return fmt.Errorf("the checkpoint %s cannot be read (%w) nor moved aside: %w; remove it, the plugin then starts without the answers it gave before", path, err, rerr)
		}
		logger.Error(err, "The checkpoint cannot be read; moved it aside and starting without the answers it held. A container admitted in another order than its pod's allocation record may show the wrong devices in its record until it restarts",
			"path", path, "movedTo", bad)
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledger.Restore(served, time.Now())
	p.savedCheckpoint = data
	logger.Info("Loaded the answers of the previous run from the checkpoint", "path", path, "answers", len(served))
	return nil
}

// otherNodeError says a checkpoint was written for another node or instance shape.
type otherNodeError struct{ msg string }

func (e *otherNodeError) Error() string { return e.msg }

// parseCheckpoint decodes and checks a checkpoint written on node with shape. Every answer must
// name a resource the plugin serves, kubelet ids it could have offered, and hardware of the node
// that matches the resource's ids (devices for neuron and neurondevice, cores for neuroncore).
func parseCheckpoint(data []byte, node string, shape *topology.Shape) (map[ledger.AnswerKey]ledger.Answer, error) {
	var c checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("not a neuron-device-plugin checkpoint: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a neuron-device-plugin checkpoint: data after the JSON object")
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint version %d: this plugin reads version %d", c.Version, checkpointVersion)
	}
	if c.Node != node {
		return nil, &otherNodeError{fmt.Sprintf("the checkpoint is node %q's, this is node %q", c.Node, node)}
	}
	if c.InstanceType != shape.Type.Name || c.LNC != shape.LNC {
		return nil, &otherNodeError{fmt.Sprintf("the checkpoint was written for %s at LNC %d, the node is now %s at LNC %d", c.InstanceType, c.LNC, shape.Type.Name, shape.LNC)}
	}
	served := make(map[ledger.AnswerKey]ledger.Answer, len(c.Answers))
	for i, a := range c.Answers {
		e, err := a.answer(shape)
		if err != nil {
			return nil, fmt.Errorf("answer %d: %w", i, err)
		}
		k := ledger.KeyOf(e.Resource, e.Kubelet)
		if _, dup := served[k]; dup {
			return nil, fmt.Errorf("answer %d: %s ids %v are answered twice", i, e.Resource, e.Kubelet)
		}
		served[k] = e
	}
	return served, nil
}

// answer checks an answer against the node's shape and returns it as a ledger.Answer.
func (a checkpointAnswer) answer(shape *topology.Shape) (ledger.Answer, error) {
	if !slices.Contains(Resources, a.Resource) {
		return ledger.Answer{}, fmt.Errorf("resource %q is not one this plugin serves (%v)", a.Resource, Resources)
	}
	if len(a.KubeletIDs) == 0 {
		return ledger.Answer{}, errors.New("no kubelet ids")
	}
	if _, err := ledger.HardwareOf(shape, a.Resource, a.KubeletIDs); err != nil {
		return ledger.Answer{}, fmt.Errorf("kubelet ids: %w", err)
	}
	hw, err := allocation.Container{Resource: a.Resource, Devices: a.Devices, Cores: a.Cores}.Hardware(shape)
	if err != nil {
		return ledger.Answer{}, fmt.Errorf("hardware: %w", err)
	}
	if !slices.Equal(hw.Devices, a.Devices) || !slices.Equal(hw.Cores, a.Cores) {
		return ledger.Answer{}, fmt.Errorf("devices %v and cores %v do not go together on %s at LNC %d (%s: devices %v, cores %v)",
			a.Devices, a.Cores, shape.Type.Name, shape.LNC, a.Resource, hw.Devices, hw.Cores)
	}
	if len(hw.Cores) == 0 {
		return ledger.Answer{}, errors.New("no hardware")
	}
	if a.At.IsZero() {
		return ledger.Answer{}, errors.New("no time")
	}
	if y := a.At.UTC().Year(); y < 1 || y > 9999 {
		return ledger.Answer{}, fmt.Errorf("time %s is out of range", a.At.Format(time.RFC3339))
	}
	kubelet := slices.Clone(a.KubeletIDs)
	ledger.SortIDs(kubelet)
	return ledger.Answer{
		Hardware: hw, Resource: a.Resource, Kubelet: kubelet, PodUID: types.UID(a.PodUID), Pod: parsePodName(a.Pod), Container: a.Container, At: a.At, Seen: a.Seen,
	}, nil
}

// parsePodName reads namespace/name; anything else names no pod.
func parsePodName(s string) ledger.PodKey {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return ledger.PodKey{}
	}
	return ledger.PodKey{Namespace: ns, Name: name}
}
