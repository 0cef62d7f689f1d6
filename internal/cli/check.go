package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler"
)

// Severities of `kubectl-neuron check` findings.
const (
	// SeverityError: no new Neuron node would be launched for the pod (the autoscaler's checks,
	// seed 000), or no node can serve it.
	SeverityError = "error"
	// SeverityWarning: the pod schedules, but not as its author expects.
	SeverityWarning = "warning"
)

// Finding is one element of `kubectl-neuron check -o json`.
type Finding struct {
	// Object is "Kind namespace/name" (or "Kind name" without a namespace) and the file.
	Object   string `json:"object"`
	File     string `json:"file"`
	Severity string `json:"severity"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
}

type checkOptions struct {
	files         []string
	schedulerName string
	output        string
}

func newCheckCommand(o *options) *cobra.Command {
	c := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check -f FILE...",
		Short: "Check Neuron workloads in manifests before applying them",
		Long: `check reads Pods and the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets,
Jobs, CronJobs, ReplicationControllers and PodTemplates, and reports for each that asks for
aws.amazon.com/neuron, neurondevice or neuroncore (or a ResourceClaim of DeviceClass
neuron.aws.com defined in the same files):

errors, why no Neuron node would be launched for it or none could serve it (the checks of
neuron-autoscaler: the aws.amazon.com/neuron taint toleration, limits equal to requests,
selectors and affinity new nodes can match, counts some instance type accepts); the device
plugin and the DRA driver are assumed to be installed;

warnings: a neuroncore count that Karpenter, which counts physical NeuronCores, believes fits
an LNC=2 instance type (128 on trn2.48xlarge) although the node advertises half as many
(64), and a request for more than one device (or for cores that span devices) in a pod whose
schedulerName is not the scheduler extender's (--scheduler-name), which skips the topology
checks.

It exits 1 when it reports an error, 0 when it reports warnings only or nothing.`,
		Example: `  kubectl-neuron check -f deploy/training.yaml
  kubectl-neuron check -f job.yaml --scheduler-name default-scheduler -o json
  helm template my-release ./chart | kubectl-neuron check -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCheck(o, c, cmd.InOrStdin()) },
	}
	f := cmd.Flags()
	f.StringArrayVarP(&c.files, "filename", "f", nil, "manifest file (YAML or JSON, several documents allowed; - reads stdin); repeatable")
	f.StringVar(&c.schedulerName, "scheduler-name", autoscaler.DefaultSchedulerName,
		"the scheduler the scheduler extender is registered with (default-scheduler with the chart's scheduler.defaultScheduler.enabled)")
	f.StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	return cmd
}

// podSource is a pod or a pod template read from a manifest.
type podSource struct {
	object, file string
	pod          *corev1.Pod
}

// claimSpecs are the ResourceClaims and ResourceClaimTemplates of the files, by namespace/name.
type claimSpecs struct {
	claims, templates map[string]resourcev1.ResourceClaimSpec
}

func runCheck(o *options, c *checkOptions, stdin io.Reader) error {
	if err := checkOutput(c.output, "table", "json"); err != nil {
		return err
	}
	if len(c.files) == 0 {
		return usageErr("name the manifests to check with -f FILE (- for stdin)")
	}
	cat, err := o.catalog()
	if err != nil {
		return err
	}
	var pods []podSource
	specs := claimSpecs{claims: map[string]resourcev1.ResourceClaimSpec{}, templates: map[string]resourcev1.ResourceClaimSpec{}}
	for _, file := range c.files {
		data, err := readManifest(file, stdin)
		if err != nil {
			return usageErr("%w", err)
		}
		p, err := decodeManifest(file, data, &specs)
		if err != nil {
			return usageErr("%w", err)
		}
		pods = append(pods, p...)
	}
	findings := []Finding{}
	neuronPods := 0
	// Offline, no node's versions are known: a selector on them may match (see DeviceTemplates).
	templates := autoscaler.NewDeviceTemplates(cat, nil)
	for _, p := range pods {
		d := autoscaler.NewPodDemand(p.pod, templates.Resolve(context.Background(), specs.draRequests(p.pod)))
		if !d.Neuron() {
			continue
		}
		neuronPods++
		add := func(severity, reason, msg string) {
			findings = append(findings, Finding{Object: p.object, File: p.file, Severity: severity, Reason: reason, Message: msg})
		}
		for _, pr := range autoscaler.Check(d, autoscaler.Environment{Catalog: cat, DevicePlugin: true, DRADriver: true}) {
			add(SeverityError, pr.Reason, pr.Message)
		}
		for _, w := range autoscaler.Advise(p.pod, autoscaler.AdviceOptions{Catalog: cat, SchedulerName: c.schedulerName}) {
			add(SeverityWarning, w.Reason, w.Message)
		}
	}
	if c.output == "json" {
		if err := writeJSON(o.out, findings); err != nil {
			return err
		}
	} else {
		for _, f := range findings {
			fmt.Fprintf(o.out, "%s (%s): %s %s: %s\n", f.Object, f.File, f.Severity, f.Reason, f.Message)
		}
		fmt.Fprintf(o.out, "%d Neuron %s checked: %d %s, %d %s\n", neuronPods, pluralWord(neuronPods, "pod"),
			count(findings, SeverityError), pluralWord(count(findings, SeverityError), "error"),
			count(findings, SeverityWarning), pluralWord(count(findings, SeverityWarning), "warning"))
	}
	if n := count(findings, SeverityError); n > 0 {
		return &exitError{code: ExitRefused, err: fmt.Errorf("%d Neuron %s would not get a node: see the errors above", n, pluralWord(n, "problem"))}
	}
	return nil
}

func count(fs []Finding, severity string) int {
	n := 0
	for _, f := range fs {
		if f.Severity == severity {
			n++
		}
	}
	return n
}

func pluralWord(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func readManifest(file string, stdin io.Reader) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(file)
}

// decodeManifest returns the pods and pod templates of a file and records its claim specs.
// Kinds it does not know are skipped; a known kind that does not decode is an error.
func decodeManifest(file string, data []byte, specs *claimSpecs) ([]podSource, error) {
	var out []podSource
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
			Items           []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if head.Kind == "List" {
			for _, item := range head.Items {
				p, err := decodeManifest(file, item, specs)
				if err != nil {
					return nil, err
				}
				out = append(out, p...)
			}
			continue
		}
		pod, err := decodeObject(head.Kind, doc, specs)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", file, head.Kind, head.Metadata.Name, err)
		}
		if pod == nil {
			continue
		}
		object := head.Kind + " " + head.Metadata.Name
		if head.Metadata.Namespace != "" {
			object = head.Kind + " " + head.Metadata.Namespace + "/" + head.Metadata.Name
		}
		if pod.Namespace == "" {
			pod.Namespace = head.Metadata.Namespace
		}
		if pod.Name == "" {
			pod.Name = head.Metadata.Name
		}
		out = append(out, podSource{object: object, file: file, pod: pod})
	}
}

// decodeObject returns the pod, or the pod template as a pod, of one object; nil for kinds
// without one.
func decodeObject(kind string, doc []byte, specs *claimSpecs) (*corev1.Pod, error) {
	template := func(meta metav1.ObjectMeta, t corev1.PodTemplateSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: meta.Namespace, Name: meta.Name, Labels: t.Labels}, Spec: t.Spec}
	}
	switch kind {
	case "Pod":
		var p corev1.Pod
		err := yaml.Unmarshal(doc, &p)
		return &p, err
	case "Deployment":
		var o appsv1.Deployment
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), err
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), err
	case "StatefulSet":
		var o appsv1.StatefulSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), err
	case "DaemonSet":
		var o appsv1.DaemonSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), err
	case "Job":
		var o batchv1.Job
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), err
	case "CronJob":
		var o batchv1.CronJob
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.JobTemplate.Spec.Template), err
	case "ReplicationController":
		var o corev1.ReplicationController
		err := yaml.Unmarshal(doc, &o)
		if err != nil || o.Spec.Template == nil {
			return nil, err
		}
		return template(o.ObjectMeta, *o.Spec.Template), nil
	case "PodTemplate":
		var o corev1.PodTemplate
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Template), err
	case "ResourceClaim":
		var o resourcev1.ResourceClaim
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, err
		}
		specs.claims[o.Namespace+"/"+o.Name] = o.Spec
	case "ResourceClaimTemplate":
		var o resourcev1.ResourceClaimTemplate
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, err
		}
		specs.templates[o.Namespace+"/"+o.Name] = o.Spec.Spec
	}
	return nil, nil
}

// draRequests resolves the pod's claims against the claims and templates of the files; a claim
// defined elsewhere is not checked.
func (s claimSpecs) draRequests(pod *corev1.Pod) []autoscaler.DRARequest {
	var out []autoscaler.DRARequest
	for _, rc := range pod.Spec.ResourceClaims {
		switch {
		case rc.ResourceClaimName != nil:
			if spec, ok := s.claims[pod.Namespace+"/"+*rc.ResourceClaimName]; ok {
				out = append(out, autoscaler.DRARequestsOf(spec)...)
			}
		case rc.ResourceClaimTemplateName != nil:
			if spec, ok := s.templates[pod.Namespace+"/"+*rc.ResourceClaimTemplateName]; ok {
				out = append(out, autoscaler.DRARequestsOf(spec)...)
			}
		}
	}
	return out
}
