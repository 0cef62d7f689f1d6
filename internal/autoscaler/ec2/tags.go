package ec2

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
	"github.com/kube-neuron/kube-neuron/internal/labels"
)

// Instance tags. The instance also carries autoscaler.LaunchedByLabel=LaunchedByValue,
// labels.AllocationMode=<mode> and autoscaler.PlannedPodsAnnotation (see the package doc).
const (
	// NameTag is the name the EC2 console shows: the request's name.
	NameTag = "Name"
	// NodeNameTag is the request's name (autoscaler.NodeName), by which Launch finds an
	// instance it already launched; Instances reports it as the annotation
	// autoscaler.RequestNameAnnotation, of the same key.
	NodeNameTag = autoscaler.RequestNameAnnotation
	// NodeTemplateLabelPrefix and NodeTemplateTaintPrefix are the cluster-autoscaler and
	// Karpenter convention for the labels (<prefix><key>=<value>) and taints
	// (<prefix><key>=<value>:<effect>) a node will have.
	NodeTemplateLabelPrefix = "k8s.io/cluster-autoscaler/node-template/label/"
	NodeTemplateTaintPrefix = "k8s.io/cluster-autoscaler/node-template/taint/"

	clusterTagPrefix = "kubernetes.io/cluster/"
	clusterTagValue  = "owned"

	// EC2's limits: 128 characters per key, 256 per value (50 tags per resource).
	maxTagKey   = 128
	maxTagValue = 256
	// plannedPodsTagCount is how many tags may carry the planned pods (planned-pods,
	// planned-pods-2, ...), 2048 characters of names: dozens of pods, more than a node takes.
	plannedPodsTagCount = 8
)

// launchTags are the tags of a launch.
type launchTags struct {
	instance, volume []types.Tag
}

func tag(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }

// tags are the tags of the instance and volumes launched for r, in a fixed order (a retried
// RunInstances must repeat its parameters exactly for its client token to match).
func (p *Provider) tags(r autoscaler.NodeRequest) launchTags {
	common := []types.Tag{
		tag(NameTag, r.Name),
		tag(NodeNameTag, r.Name),
		tag(autoscaler.LaunchedByLabel, autoscaler.LaunchedByValue),
	}
	if p.o.ClusterName != "" {
		common = append(common, tag(clusterTagPrefix+p.o.ClusterName, clusterTagValue))
	}
	inst := slices.Clone(common)
	if r.Mode != "" {
		inst = append(inst, tag(labels.AllocationMode, r.Mode))
	}
	for _, k := range []string{labels.CapacityType, labels.CapacityReservationID} {
		if v := r.Labels[k]; v != "" {
			inst = append(inst, tag(k, v))
		}
	}
	if v := r.Annotations[labels.CapacityReservationEndAnnotation]; v != "" {
		inst = append(inst, tag(labels.CapacityReservationEndAnnotation, v))
	}
	inst = append(inst, plannedPodsTags(r.Annotations[autoscaler.PlannedPodsAnnotation])...)
	// A label or taint whose tag would exceed EC2's limits is left out: the tags only describe
	// the node (the launch template's user data sets its labels and taints).
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		if key, v := NodeTemplateLabelPrefix+k, r.Labels[k]; len(key) <= maxTagKey && len(v) <= maxTagValue {
			inst = append(inst, tag(key, v))
		}
	}
	taints := slices.Clone(r.Taints)
	slices.SortStableFunc(taints, func(a, b corev1.Taint) int { return cmp.Compare(a.Key, b.Key) })
	seen := map[string]bool{}
	for _, t := range taints {
		// The convention has one value per key; the first taint of a key wins.
		key, v := NodeTemplateTaintPrefix+t.Key, t.Value+":"+string(t.Effect)
		if seen[t.Key] || len(key) > maxTagKey || len(v) > maxTagValue {
			continue
		}
		seen[t.Key] = true
		inst = append(inst, tag(key, v))
	}
	return launchTags{instance: inst, volume: common}
}

// plannedPodsTags splits the planned-pods list over tags of at most 256 characters:
// planned-pods, planned-pods-2, ... (at launch, and in SetPlannedPods). A list longer than
// plannedPodsTagCount tags is cut after its last whole pod name that fits: the tags then
// under-count the pods planned onto the node, and a restarted autoscaler may plan the rest again
// until the node registers (the controller that planned them keeps them all in memory).
func plannedPodsTags(v string) []types.Tag {
	if limit := maxTagValue * plannedPodsTagCount; len(v) > limit {
		v = v[:max(strings.LastIndexByte(v[:limit+1], ','), 0)]
	}
	var out []types.Tag
	for i := 1; v != ""; i++ {
		n := min(len(v), maxTagValue)
		for n < len(v) && n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		out = append(out, tag(plannedPodsKey(i), v[:n]))
		v = v[n:]
	}
	return out
}

func plannedPodsKey(i int) string {
	if i == 1 {
		return autoscaler.PlannedPodsAnnotation
	}
	return autoscaler.PlannedPodsAnnotation + "-" + strconv.Itoa(i)
}

// plannedPodsIndex is i for the tag key plannedPodsKey(i), 0 for any other key.
func plannedPodsIndex(key string) int {
	if key == autoscaler.PlannedPodsAnnotation {
		return 1
	}
	n, ok := strings.CutPrefix(key, autoscaler.PlannedPodsAnnotation+"-")
	if !ok {
		return 0
	}
	if i, err := strconv.Atoi(n); err == nil && i >= 2 && strconv.Itoa(i) == n {
		return i
	}
	return 0
}

// labelsOf are the node labels an instance's tags describe.
func labelsOf(tags map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tags {
		if l, ok := strings.CutPrefix(k, NodeTemplateLabelPrefix); ok {
			out[l] = v
		}
	}
	for _, k := range []string{autoscaler.LaunchedByLabel, labels.AllocationMode, labels.CapacityType, labels.CapacityReservationID} {
		if v, ok := tags[k]; ok {
			out[k] = v
		}
	}
	return out
}

// annotationsOf are the planned pods (joined again), the request's name, a Capacity Block's end
// and the instance's Capacity Block id (blockID, "" if none).
func annotationsOf(tags map[string]string, blockID string) map[string]string {
	out := map[string]string{}
	var pods strings.Builder
	for i := 1; i <= plannedPodsTagCount; i++ {
		v, ok := tags[plannedPodsKey(i)]
		if !ok {
			break
		}
		pods.WriteString(v)
	}
	if pods.Len() > 0 {
		out[autoscaler.PlannedPodsAnnotation] = pods.String()
	}
	if v, ok := tags[NodeNameTag]; ok {
		out[NodeNameTag] = v
	}
	if v, ok := tags[labels.CapacityReservationEndAnnotation]; ok {
		out[labels.CapacityReservationEndAnnotation] = v
	}
	if blockID != "" {
		out[CapacityBlockIDAnnotation] = blockID
	}
	return out
}
