{{/*
Values files written for AWS's neuron-helm-chart (1.10.0), and the checks on images and
neuronInstances that such a file, or the seeds' install commands, run into. docs/migration.md has
the table of every AWS key.
*/}}

{{/*
kube-neuron.normalize applies the AWS keys that have a counterpart here onto that counterpart, in
.Values itself, before anything reads it (every template that reads them includes this first; it
is idempotent):
  devicePlugin.namespaceOverride, scheduler.namespaceOverride -> <component>.namespace
  scheduler.replicaCount, scheduler.customScheduler.replicaCount -> replicas
  scheduler.customScheduler.image {repository, tag, pullPolicy} -> image, imagePullPolicy
  (and scheduler.customScheduler.image's default, kept out of values.yaml so that a table and a
  string both merge without a warning)
  and the defaults of scheduler.customScheduler.mode, .pluginImage and scheduler.tls.generate
  where the values lack them (helm upgrade --reuse-values of an older release)
*/}}
{{- define "kube-neuron.normalize" -}}
{{- $v := .Values -}}
{{- range $c := list $v.devicePlugin $v.scheduler -}}
{{- with $c.namespaceOverride -}}{{- $_ := set $c "namespace" . -}}{{- end -}}
{{- end -}}
{{- range $c := list $v.scheduler $v.scheduler.customScheduler -}}
{{- if hasKey $c "replicaCount" -}}{{- $_ := set $c "replicas" (int $c.replicaCount) -}}{{- end -}}
{{- end -}}
{{- $cs := $v.scheduler.customScheduler -}}
{{- /* Keys newer than some installed releases: `helm upgrade --reuse-values` renders with the
old release's chart values, which lack them (the schema does not require them either). */ -}}
{{- if not (hasKey $cs "mode") -}}{{- $_ := set $cs "mode" "extender" -}}{{- end -}}
{{- if not (hasKey $cs "pluginImage") -}}{{- $_ := set $cs "pluginImage" (dict "repository" "neuron-kube-scheduler") -}}{{- end -}}
{{- if not (hasKey $v.scheduler.tls "generate") -}}{{- $_ := set $v.scheduler.tls "generate" true -}}{{- end -}}
{{- if not (hasKey $cs "image") -}}
{{- $_ := set $cs "image" "registry.k8s.io/kube-scheduler:v1.36.3" -}}
{{- end -}}
{{- if kindIs "map" $cs.image -}}
{{- $img := $cs.image -}}
{{- with $img.pullPolicy -}}{{- $_ := set $cs "imagePullPolicy" . -}}{{- end -}}
{{- $_ := set $cs "image" (printf "%s:%s" $img.repository (required "scheduler.customScheduler.image.tag is required when scheduler.customScheduler.image is a table (repository and tag, as in AWS's chart); or give the whole reference as a string, e.g. registry.k8s.io/kube-scheduler:v1.36.3" $img.tag)) -}}
{{- end -}}
{{- end -}}

{{/*
kube-neuron.lookup prints the JSON of the value at a dotted path of .Values, or nothing when a
key on the way is missing. Takes (dict "values" .Values "path" "a.b.c").
*/}}
{{- define "kube-neuron.lookup" -}}
{{- $cur := .values -}}
{{- $found := true -}}
{{- range splitList "." .path -}}
{{- if and $found (kindIs "map" $cur) (hasKey $cur .) -}}
{{- $cur = get $cur . -}}
{{- else -}}
{{- $found = false -}}
{{- end -}}
{{- end -}}
{{- if and $found (not (kindIs "invalid" $cur)) -}}{{ toJson $cur }}{{- end -}}
{{- end -}}

{{/*
kube-neuron.aws.ignored fails on an AWS key without a counterpart here that holds anything but
AWS's default, and prints the keys that hold it (they are ignored), one per line.
*/}}
{{- define "kube-neuron.aws.ignored" -}}
{{- $defaults := .Files.Get "files/aws-neuron-helm-chart-1.10.0-ignored.yaml" | fromYaml -}}
{{- $hints := dict
  "ultraserverOperator.enabled" "kube-neuron has no UltraServer operator: the device plugin and the DRA driver read UltraServer membership from the Neuron driver on each node, and the scheduler extender and the autoscaler place UltraServer jobs (docs/choosing.md)"
  "npd.nodeRecovery.enabled" "kube-neuron's node problem detector sets the NeuronHealth condition but does not replace nodes; use EKS node auto repair or your own remediation on that condition"
  "devicePlugin.env" "the chart sets the device plugin's environment from its own values (devicePlugin.*; extra flags in devicePlugin.args)"
  "draDriver.env" "the chart sets the DRA driver's environment from its own values (draDriver.cdiRoot, kubeletPluginsDirectoryPath, kubeletRegistrarDirectoryPath, healthcheckPort; extra flags in draDriver.args)"
  "scheduler.env" "the chart sets the extender's environment from its own values (scheduler.port; extra flags in scheduler.args)"
  "devicePlugin.affinity" "the chart selects Neuron nodes from neuronInstances and neuronNodes; add requirements with neuronNodes.extraMatchExpressions or devicePlugin.nodeSelector"
  "draDriver.affinity" "the chart selects Neuron nodes from neuronInstances and neuronNodes; add requirements with neuronNodes.extraMatchExpressions or draDriver.nodeSelector"
-}}
{{- range $path := keys $defaults | sortAlpha -}}
{{- $got := include "kube-neuron.lookup" (dict "values" $.Values "path" $path) -}}
{{- if $got -}}
{{- $want := get $defaults $path | toJson -}}
{{- if ne $got $want -}}
{{- $hint := get $hints $path | default "kube-neuron's chart has no counterpart of it (docs/migration.md lists every key of AWS's chart and what to use instead)" -}}
{{- fail (printf "%s is %s, but %s. Remove it from your values (AWS's default, %s, is accepted and ignored)." $path $got $hint $want) -}}
{{- end -}}
{{ $path }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/*
kube-neuron.aws.images fails on a component image that is AWS's (a repository under
public.ecr.aws/neuron/): the chart would run AWS's binary, which is not kube-neuron's.
*/}}
{{- define "kube-neuron.aws.images" -}}
{{- range $key, $name := dict "devicePlugin" "neuron-device-plugin" "draDriver" "neuron-dra-driver" "scheduler" "neuron-scheduler-extender" "autoscaler" "neuron-autoscaler" -}}
{{- $repo := (get (get $.Values $key) "image").repository | default "" -}}
{{- if hasPrefix "public.ecr.aws/neuron/" $repo -}}
{{- fail (printf "%s.image.repository is AWS's image, not kube-neuron's: remove it or point it at kube-neuron's %s (docs/images.md)" $key $name) -}}
{{- end -}}
{{- end -}}
{{- if hasPrefix "public.ecr.aws/neuron/" ($.Values.scheduler.customScheduler.pluginImage.repository | default "") -}}
{{- fail "scheduler.customScheduler.pluginImage.repository is AWS's image, not kube-neuron's: AWS's neuron-scheduler is an extender, not a kube-scheduler with the NeuronTopology plugin. Remove it or point it at kube-neuron's neuron-kube-scheduler (docs/images.md)" -}}
{{- end -}}
{{- end -}}

{{/*
kube-neuron.hasRegistry is "true" when an image reference names a registry host: its first path
element has a dot or a port, or is localhost (the rule container runtimes use).
*/}}
{{- define "kube-neuron.hasRegistry" -}}
{{- $parts := splitList "/" . -}}
{{- if gt (len $parts) 1 -}}
{{- $first := first $parts -}}
{{- if or (contains "." $first) (contains ":" $first) (eq $first "localhost") -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/*
kube-neuron.pullable fails when an enabled component would run an image without a registry (a
bare name such as neuron-dra-driver:0.1.0, which a node pulls from Docker Hub), unless
image.localImages says the images are in the nodes' container runtime already.
*/}}
{{- define "kube-neuron.pullable" -}}
{{- if not .Values.image.localImages -}}
{{- $bare := list -}}
{{- $images := list -}}
{{- range $key := list "devicePlugin" "draDriver" "scheduler" "autoscaler" -}}
{{- $c := get $.Values $key -}}
{{- if and $c.enabled (or (ne $key "scheduler") (include "kube-neuron.scheduler.extender" $)) -}}
{{- $images = append $images (list (printf "%s.image" $key) $c.image) -}}
{{- end -}}
{{- end -}}
{{- if include "kube-neuron.myScheduler.plugin" . -}}
{{- $images = append $images (list "scheduler.customScheduler.pluginImage" .Values.scheduler.customScheduler.pluginImage) -}}
{{- end -}}
{{- range $images -}}
{{- $ref := include "kube-neuron.image" (dict "root" $ "image" (index . 1)) -}}
{{- if not (include "kube-neuron.hasRegistry" $ref) -}}
{{- $bare = append $bare (printf "%s (%s)" (index . 0) $ref) -}}
{{- end -}}
{{- end -}}
{{- if $bare -}}
{{- fail (printf "image.registry is empty, so %s would be pulled by bare name, which no node can pull: kube-neuron's images are not on a public registry. Build them (make images) and push them to a registry of yours (docs/images.md, \"Push\"), then --set image.registry=<registry>, e.g. 111122223333.dkr.ecr.us-west-2.amazonaws.com; or set image.localImages=true when the images are already loaded into every node's container runtime under these names." (join ", " $bare)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
kube-neuron.neuronInstances fails on a neuronInstances entry that is neither a type of the catalog
nor one of the Neuron types the catalog does not model (files/instance-types.yaml), with or
without the SageMaker prefix ml.
*/}}
{{- define "kube-neuron.neuronInstances" -}}
{{- $types := .Files.Get "files/instance-types.yaml" | fromYaml -}}
{{- $known := concat $types.catalog $types.notModelled -}}
{{- range .Values.neuronInstances -}}
{{- if not (has (trimPrefix "ml." .) $known) -}}
{{- fail (printf "neuronInstances has %q, which is not a Neuron instance type kube-neuron knows. Use one of %s, or one of them with the SageMaker prefix ml. (kubectl-neuron catalog lists the catalog's; a type of your own goes in a catalog file, docs/catalog.md, and here)." . (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
