package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/kube-neuron/kube-neuron/internal/autoscaler/plan"
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

// Reasons of the findings check adds to the autoscaler's and the advice's.
const (
	// ReasonAPIVersionNotServed: the object's apiVersion is not served by the cluster check
	// assumes (Kubernetes 1.34 or later, default API versions): kubectl apply fails.
	ReasonAPIVersionNotServed = "APIVersionNotServed"
	// ReasonUnsatisfiableConstraint: a ResourceClaim constraint no node's devices can meet: the
	// pod stays Pending with "cannot allocate all claims".
	ReasonUnsatisfiableConstraint = "UnsatisfiableConstraint"
)

type checkOptions struct {
	files         []string
	recursive     bool
	schedulerName string
	output        string
}

// checkLong is `check --help`; docs/kubectl-neuron.md says the same.
const checkLong = `check reads Pods and the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets,
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

It also reports as errors, for every object it reads:
  an apiVersion the cluster will not serve: check assumes Kubernetes ` + AssumedKubernetes + ` or later with the
      API server's default API versions, which serves resource.k8s.io/v1 and not its beta
      versions (a resource.k8s.io/v1beta1 ResourceClaimTemplate fails at kubectl apply)
  a ResourceClaim (template) constraint no node's devices can meet: matchAttribute on
      resource.aws.com/devicegroup4_id with 6 devices (a group has 4), an attribute no Neuron
      device publishes, a name without its domain

What check cannot know offline (it reads only the files):
  - the cluster's Kubernetes version and enabled API versions (it assumes the above), and
    whether the device plugin, the DRA driver, the scheduler extender and neuron-autoscaler are
    installed (it assumes they are);
  - the versions the nodes run: neuronDriverVersion and draDriverVersion, the EFA device group
    ids, network nodes and UltraServer ids (a selector on them is assumed to match);
  - free capacity: which nodes exist, which devices and cores are in use, quotas, LimitRanges
    and the autoscaler's limits (kubectl-neuron nodes shows the cluster's usage);
  - admission webhooks and ValidatingAdmissionPolicies (the chart's own included), which may
    change or refuse an object;
  - ResourceClaims, ResourceClaimTemplates and DeviceClasses not in the files (their pods are
    checked without them), and the DeviceClass's opaque configs (the claims' own are checked
    with the DRA driver's own validation);
  - image pulls, PriorityClasses, and anything the container does at run time.

-f takes files, directories (their .json, .yaml and .yml files; -R their subdirectories too),
glob patterns, http(s) URLs and - for stdin, as kubectl does.

Output formats (-o): table (default), json, yaml, jsonpath=TEMPLATE over the json document.

It exits 1 when it reports an error, 0 when it reports warnings only or nothing, 2 when a
flag or a manifest cannot be read.`

func newCheckCommand(o *options) *cobra.Command {
	c := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check -f FILENAME...",
		Short: "Check Neuron workloads in manifests before applying them",
		Long:  checkLong,
		Example: `  kubectl-neuron check -f deploy/training.yaml
  kubectl-neuron check -f manifests/ -R
  kubectl-neuron check -f job.yaml --scheduler-name default-scheduler -o json
  helm template my-release ./chart | kubectl-neuron check -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCheck(o, c, cmd.InOrStdin()) },
	}
	f := cmd.Flags()
	(&genericclioptions.FileNameFlags{
		Usage:     "manifest file, directory, glob pattern, URL, or - for stdin (YAML or JSON, several documents allowed); repeatable",
		Filenames: &c.files,
		Recursive: &c.recursive,
	}).AddFlags(f)
	f.StringVar(&c.schedulerName, "scheduler-name", plan.DefaultSchedulerName,
		"the scheduler the scheduler extender is registered with (default-scheduler with the chart's scheduler.defaultScheduler.enabled)")
	f.StringVarP(&c.output, "output", "o", outTable, "output format: table, json, yaml or jsonpath=TEMPLATE")
	return cmd
}

// podSource is a pod or a pod template read from a manifest.
type podSource struct {
	object, file string
	pod          *corev1.Pod
}

// claimSpecs are the ResourceClaims and ResourceClaimTemplates of the files, by namespace/name,
// and what check found wrong with the objects themselves.
type claimSpecs struct {
	claims, templates map[string]resourcev1.ResourceClaimSpec
	objects           []claimObject
	findings          []Finding
}

// claimObject is a ResourceClaim or ResourceClaimTemplate of the files.
type claimObject struct {
	object, file string
	spec         resourcev1.ResourceClaimSpec
}

func runCheck(o *options, c *checkOptions, stdin io.Reader) error {
	format, err := parseOutput(c.output, commandFormats["check"]...)
	if err != nil {
		return err
	}
	if len(c.files) == 0 {
		return usageErr("name the manifests to check with -f FILE (a directory, -R for its subdirectories, - for stdin)")
	}
	cat, err := o.catalog()
	if err != nil {
		return err
	}
	files, err := expandFilenames(c.files, c.recursive)
	if err != nil {
		return usageErr("%w", err)
	}
	var pods []podSource
	specs := claimSpecs{claims: map[string]resourcev1.ResourceClaimSpec{}, templates: map[string]resourcev1.ResourceClaimSpec{}}
	for _, file := range files {
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
	findings := append([]Finding{}, specs.findings...)
	models := newDeviceModels(cat)
	for _, co := range specs.objects {
		for _, msg := range models.constraintProblems(co.spec) {
			findings = append(findings, Finding{Object: co.object, File: co.file, Severity: SeverityError, Reason: ReasonUnsatisfiableConstraint, Message: msg})
		}
	}
	neuronPods := 0
	// Offline, no node's versions are known: a selector on them may match (see DeviceTemplates).
	templates := plan.NewDeviceTemplates(cat, nil, nil)
	for _, p := range pods {
		dra, claims := specs.draRequests(p.pod)
		d := plan.NewPodDemand(p.pod, templates.Resolve(context.Background(), dra))
		d.Claims = claims
		if !d.Neuron() {
			continue
		}
		neuronPods++
		add := func(severity, reason, msg string) {
			findings = append(findings, Finding{Object: p.object, File: p.file, Severity: severity, Reason: reason, Message: msg})
		}
		for _, pr := range plan.Check(d, plan.Environment{Catalog: cat, DevicePlugin: true, DRADriver: true, Devices: templates}) {
			add(SeverityError, pr.Reason, pr.Message)
		}
		for _, w := range plan.Advise(p.pod, plan.AdviceOptions{Catalog: cat, SchedulerName: c.schedulerName}) {
			add(SeverityWarning, w.Reason, w.Message)
		}
	}
	if format.data() {
		if err := writeData(o.out, format, findings, false); err != nil {
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
	n := count(findings, SeverityError)
	objectErrors := 0
	for _, f := range findings {
		if f.Reason == ReasonAPIVersionNotServed || f.Reason == ReasonUnsatisfiableConstraint {
			objectErrors++
		}
	}
	switch {
	case n > 0 && objectErrors == 0:
		return &exitError{code: ExitRefused, err: fmt.Errorf("%d Neuron %s would not get a node: see the errors above", n, pluralWord(n, "problem"))}
	case n > 0:
		return &exitError{code: ExitRefused, err: fmt.Errorf("%d %s in the manifests: see above", n, pluralWord(n, "error"))}
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
		object := head.Kind + " " + head.Metadata.Name
		if head.Metadata.Namespace != "" {
			object = head.Kind + " " + head.Metadata.Namespace + "/" + head.Metadata.Name
		}
		if msg := apiVersionProblem(head.APIVersion, head.Kind); msg != "" {
			specs.findings = append(specs.findings, Finding{Object: object, File: file, Severity: SeverityError, Reason: ReasonAPIVersionNotServed, Message: msg})
		}
		pod, claim, err := decodeObject(head.APIVersion, head.Kind, doc, specs)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", file, head.Kind, head.Metadata.Name, err)
		}
		if claim != nil {
			specs.objects = append(specs.objects, claimObject{object: object, file: file, spec: *claim})
		}
		if pod == nil {
			continue
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

// decodeObject returns the pod, or the pod template as a pod, of one object; for a ResourceClaim
// or ResourceClaimTemplate, its claim spec (recorded in specs too). A claim of
// resource.k8s.io/v1beta1 is read in the v1 layout, so that its pods are still checked.
func decodeObject(apiVersion, kind string, doc []byte, specs *claimSpecs) (*corev1.Pod, *resourcev1.ResourceClaimSpec, error) {
	template := func(meta metav1.ObjectMeta, t corev1.PodTemplateSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: meta.Namespace, Name: meta.Name, Labels: t.Labels}, Spec: t.Spec}
	}
	if (kind == "ResourceClaim" || kind == "ResourceClaimTemplate") && apiVersion == "resource.k8s.io/v1beta1" {
		var err error
		if doc, err = v1beta1ClaimAsV1(kind, doc); err != nil {
			return nil, nil, err
		}
	}
	switch kind {
	case "Pod":
		var p corev1.Pod
		err := yaml.Unmarshal(doc, &p)
		return &p, nil, err
	case "Deployment":
		var o appsv1.Deployment
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), nil, err
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), nil, err
	case "StatefulSet":
		var o appsv1.StatefulSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), nil, err
	case "DaemonSet":
		var o appsv1.DaemonSet
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), nil, err
	case "Job":
		var o batchv1.Job
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.Template), nil, err
	case "CronJob":
		var o batchv1.CronJob
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Spec.JobTemplate.Spec.Template), nil, err
	case "ReplicationController":
		var o corev1.ReplicationController
		err := yaml.Unmarshal(doc, &o)
		if err != nil || o.Spec.Template == nil {
			return nil, nil, err
		}
		return template(o.ObjectMeta, *o.Spec.Template), nil, nil
	case "PodTemplate":
		var o corev1.PodTemplate
		err := yaml.Unmarshal(doc, &o)
		return template(o.ObjectMeta, o.Template), nil, err
	case "ResourceClaim":
		var o resourcev1.ResourceClaim
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, nil, err
		}
		specs.claims[o.Namespace+"/"+o.Name] = o.Spec
		return nil, &o.Spec, nil
	case "ResourceClaimTemplate":
		var o resourcev1.ResourceClaimTemplate
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, nil, err
		}
		specs.templates[o.Namespace+"/"+o.Name] = o.Spec.Spec
		return nil, &o.Spec.Spec, nil
	}
	return nil, nil, nil
}

// v1beta1RequestFields are the fields of a resource.k8s.io/v1beta1 device request that v1 moved
// under exactly.
var v1beta1RequestFields = []string{"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity"}

// v1beta1ClaimAsV1 rewrites a resource.k8s.io/v1beta1 ResourceClaim or ResourceClaimTemplate in
// the v1 layout: a request without firstAvailable gets its fields under exactly. What does not
// have the expected shape is left as it is, for the decoder to report.
func v1beta1ClaimAsV1(kind string, doc []byte) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	if kind == "ResourceClaimTemplate" {
		spec, _ = spec["spec"].(map[string]any)
	}
	devs, _ := spec["devices"].(map[string]any)
	requests, _ := devs["requests"].([]any)
	for _, r := range requests {
		req, ok := r.(map[string]any)
		if !ok {
			continue
		}
		if _, has := req["firstAvailable"]; has {
			continue
		}
		exactly := map[string]any{}
		for _, k := range v1beta1RequestFields {
			if v, has := req[k]; has {
				exactly[k] = v
				delete(req, k)
			}
		}
		if len(exactly) > 0 {
			req["exactly"] = exactly
		}
	}
	return json.Marshal(obj)
}

// draRequests resolves the pod's claims against the claims and templates of the files, with the
// claims as the planner allocates them; a claim defined elsewhere is not checked.
func (s claimSpecs) draRequests(pod *corev1.Pod) ([]plan.DRARequest, []*resourcev1.ResourceClaim) {
	var out []plan.DRARequest
	var claims []*resourcev1.ResourceClaim
	add := func(name string, spec resourcev1.ResourceClaimSpec) {
		if reqs := plan.DRARequestsOf(spec); len(reqs) > 0 {
			out = append(out, reqs...)
			claims = append(claims, plan.ClaimFromTemplate(pod.Namespace, pod.Name, name, spec))
		}
	}
	for _, rc := range pod.Spec.ResourceClaims {
		switch {
		case rc.ResourceClaimName != nil:
			if spec, ok := s.claims[pod.Namespace+"/"+*rc.ResourceClaimName]; ok {
				add(rc.Name, spec)
			}
		case rc.ResourceClaimTemplateName != nil:
			if spec, ok := s.templates[pod.Namespace+"/"+*rc.ResourceClaimTemplateName]; ok {
				add(rc.Name, spec)
			}
		}
	}
	return out, claims
}
