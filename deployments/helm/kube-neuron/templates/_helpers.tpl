{{/*
Chart label value: name-version.
*/}}
{{- define "kube-neuron.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels on every object. Components add app.kubernetes.io/name and app.kubernetes.io/component.
*/}}
{{- define "kube-neuron.labels" -}}
helm.sh/chart: {{ include "kube-neuron.chart" . }}
app.kubernetes.io/part-of: kube-neuron
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/*
A component's image: <image.registry>/<repository>:<tag>, without the registry when it is empty or
when the repository names a registry host itself (as AWS's chart writes its repositories); the tag
is the component's image.tag, else image.tag, else the chart's appVersion. Takes (dict "root" $
"image" <component>.image).
*/}}
{{- define "kube-neuron.image" -}}
{{- $g := .root.Values.image -}}
{{- $ref := printf "%s:%s" .image.repository (.image.tag | default $g.tag | default .root.Chart.AppVersion) -}}
{{- if not (include "kube-neuron.hasRegistry" .image.repository) -}}
{{- with trimSuffix "/" $g.registry -}}
{{- $ref = printf "%s/%s" . $ref -}}
{{- end -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
A component's image pull policy: its image.pullPolicy, else image.pullPolicy.
*/}}
{{- define "kube-neuron.pullPolicy" -}}
{{- .image.pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/*
The pod spec fields a component shares with AWS's chart, from its values (c): priorityClassName
and runtimeClassName when set, imagePullSecrets (the chart's and the component's), nodeSelector.
Takes (dict "root" $ "c" <component values>).
*/}}
{{- define "kube-neuron.podSpecCommon" -}}
{{- with .c.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with .c.runtimeClassName }}
runtimeClassName: {{ . | quote }}
{{- end }}
{{- with concat (.root.Values.imagePullSecrets | default list) (.c.imagePullSecrets | default list) | uniq }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Device plugin: selector labels (immutable once installed) and the full label set.
*/}}
{{- define "kube-neuron.devicePlugin.selectorLabels" -}}
app.kubernetes.io/name: neuron-device-plugin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.devicePlugin.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: neuron-device-plugin
app.kubernetes.io/component: device-plugin
{{- end -}}

{{/*
Node problem detector labels.
*/}}
{{- define "kube-neuron.npd.selectorLabels" -}}
app.kubernetes.io/name: node-problem-detector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.npd.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: node-problem-detector
app.kubernetes.io/component: node-problem-detector
{{- end -}}

{{/*
DRA driver: labels of its objects; the kubelet plugin's selector labels (immutable once
installed) and its full label set, with the published DaemonSet's app label.
*/}}
{{- define "kube-neuron.draDriver.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: neuron-dra-driver
app.kubernetes.io/component: dra-driver
{{- end -}}

{{- define "kube-neuron.draDriver.selectorLabels" -}}
app.kubernetes.io/name: neuron-dra-driver
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.draDriver.kubeletPluginLabels" -}}
{{ include "kube-neuron.draDriver.labels" . }}
app: neuron-dra-driver-kubelet-plugin
{{- end -}}

{{/*
Scheduler extender: selector labels (immutable once installed) and the full label set.
*/}}
{{- define "kube-neuron.scheduler.selectorLabels" -}}
app.kubernetes.io/name: neuron-scheduler-extender
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.scheduler.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: neuron-scheduler-extender
app.kubernetes.io/component: scheduler-extender
{{- end -}}

{{/*
my-scheduler, the second scheduler that calls the extender.
*/}}
{{- define "kube-neuron.myScheduler.selectorLabels" -}}
app.kubernetes.io/name: my-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.myScheduler.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: my-scheduler
app.kubernetes.io/component: scheduler
{{- end -}}

{{/*
neuron-autoscaler: selector labels (immutable once installed) and the full label set.
*/}}
{{- define "kube-neuron.autoscaler.selectorLabels" -}}
app.kubernetes.io/name: neuron-autoscaler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-neuron.autoscaler.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: neuron-autoscaler
app.kubernetes.io/component: autoscaler
{{- end -}}

{{/*
The extenders block of a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) that
registers the extender at urlPrefix. Takes (dict "urlPrefix" URL "weight" N "tls" T), T nil or
(dict "serverName" S "certFile" F "keyFile" K "caFile" C): HTTPS with that client certificate.
*/}}
{{- define "kube-neuron.scheduler.extenders" -}}
extenders:
  - urlPrefix: {{ .urlPrefix }}
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    weight: {{ int .weight }}
    enableHTTPS: {{ if .tls }}true{{ else }}false{{ end }}
    {{- with .tls }}
    # The extender's certificate is checked against caFile for serverName; certFile and keyFile
    # are the scheduler's client certificate.
    tlsConfig:
      serverName: {{ .serverName }}
      certFile: {{ .certFile }}
      keyFile: {{ .keyFile }}
      caFile: {{ .caFile }}
    {{- end }}
    nodeCacheCapable: true
    httpTimeout: 30s
    ignorable: false
    managedResources:
      - name: aws.amazon.com/neuron
        ignoredByScheduler: false
      - name: aws.amazon.com/neuroncore
        ignoredByScheduler: false
      - name: aws.amazon.com/neurondevice
        ignoredByScheduler: false
{{- end -}}

{{/*
The name in the extender's serving certificate that the schedulers check.
*/}}
{{- define "kube-neuron.scheduler.serverName" -}}
{{- printf "k8s-neuron-scheduler.%s.svc" .Values.scheduler.namespace -}}
{{- end -}}

{{/*
http or https: the scheme of the extender's port.
*/}}
{{- define "kube-neuron.scheduler.scheme" -}}
{{- if .Values.scheduler.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/*
Where my-scheduler mounts its client certificate Secret (scheduler.tls.clientSecretName).
*/}}
{{- define "kube-neuron.myScheduler.tlsDir" -}}
/etc/kubernetes/my-scheduler-tls
{{- end -}}

{{/*
my-scheduler's KubeSchedulerConfiguration: the extender through its Service.
*/}}
{{- define "kube-neuron.myScheduler.config" -}}
{{- $s := .Values.scheduler -}}
{{- $tls := dict -}}
{{- if $s.tls.enabled -}}
{{- $dir := include "kube-neuron.myScheduler.tlsDir" . -}}
{{- $tls = dict "serverName" (include "kube-neuron.scheduler.serverName" .) "certFile" (printf "%s/tls.crt" $dir) "keyFile" (printf "%s/tls.key" $dir) "caFile" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: my-scheduler
{{ include "kube-neuron.scheduler.extenders" (dict "urlPrefix" (printf "%s://k8s-neuron-scheduler.%s.svc.cluster.local:%d" (include "kube-neuron.scheduler.scheme" .) $s.namespace (int $s.port)) "weight" $s.extenderWeight "tls" $tls) }}
leaderElection:
  leaderElect: true
  resourceNamespace: {{ $s.namespace }}
  resourceName: my-scheduler
{{- end -}}

{{/*
The default scheduler's KubeSchedulerConfiguration: the extender through its NodePort on the
control-plane node kube-scheduler runs on.
*/}}
{{- define "kube-neuron.defaultScheduler.config" -}}
{{- $s := .Values.scheduler -}}
{{- $tls := dict -}}
{{- if $s.tls.enabled -}}
{{- $tls = merge (dict "serverName" (include "kube-neuron.scheduler.serverName" .)) $s.defaultScheduler.tls -}}
{{- end -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
# With --config, kube-scheduler ignores --kubeconfig and the --leader-elect flags.
clientConnection:
  kubeconfig: {{ $s.defaultScheduler.kubeconfig }}
leaderElection:
  leaderElect: true
profiles:
  - schedulerName: default-scheduler
{{ include "kube-neuron.scheduler.extenders" (dict "urlPrefix" (printf "%s://127.0.0.1:%d" (include "kube-neuron.scheduler.scheme" .) (int $s.defaultScheduler.nodePort)) "weight" $s.extenderWeight "tls" $tls) }}
{{- end -}}

{{/*
Fails rendering on contradictory values. validate.yaml includes it, so every render runs it.
*/}}
{{- define "kube-neuron.validate" -}}
{{- include "kube-neuron.normalize" . -}}
{{- include "kube-neuron.aws.images" . -}}
{{- $_ := include "kube-neuron.aws.ignored" . -}}
{{- include "kube-neuron.neuronInstances" . -}}
{{- include "kube-neuron.pullable" . -}}
{{- if and (or .Values.devicePlugin.enabled .Values.draDriver.enabled .Values.npd.enabled) (not (or .Values.neuronInstances .Values.neuronNodes.instanceFamilies .Values.neuronNodes.nodeLabel.key)) -}}
{{- fail "neuronInstances, neuronNodes.instanceFamilies and neuronNodes.nodeLabel.key are all empty: the Neuron DaemonSets would select no node. Give at least one of them (the chart's defaults list every Neuron instance type and family)." -}}
{{- end -}}
{{- if and .Values.draDriver.enabled .Values.devicePlugin.enabled (not .Values.devicePlugin.allowWithDRA) -}}
{{- fail "devicePlugin.enabled and draDriver.enabled are both true: a node must run the device plugin or the DRA driver, never both. Set --set devicePlugin.enabled=false (DRA only), or label the DRA nodes kube-neuron.io/allocation-mode=dra and set devicePlugin.allowWithDRA=true to run both on different nodes." -}}
{{- end -}}
{{- if and .Values.draDriver.enabled (eq (int .Values.draDriver.healthcheckPort) (int .Values.draDriver.metricsPort)) -}}
{{- fail (printf "draDriver.healthcheckPort and draDriver.metricsPort are both %d: the DRA driver serves its gRPC health service and its HTTP metrics on two ports. Set one of them to another port." (int .Values.draDriver.metricsPort)) -}}
{{- end -}}
{{- if and .Values.scheduler.customScheduler.enabled .Values.scheduler.defaultScheduler.enabled -}}
{{- fail "scheduler.customScheduler.enabled and scheduler.defaultScheduler.enabled are both true: the scheduler extender registers with one scheduler. Set --set scheduler.customScheduler.enabled=false to use the default scheduler, or leave scheduler.defaultScheduler.enabled=false to use the second scheduler my-scheduler." -}}
{{- end -}}
{{- $s := .Values.scheduler -}}
{{- if and $s.admissionPolicy.enabled (not (and $s.enabled $s.customScheduler.enabled)) -}}
{{- fail "scheduler.admissionPolicy.enabled sets schedulerName: my-scheduler on Neuron pods, but my-scheduler is not installed (it needs scheduler.enabled=true and scheduler.customScheduler.enabled=true): those pods would never be scheduled. Set --set scheduler.enabled=true, or leave scheduler.admissionPolicy.enabled=false (with scheduler.defaultScheduler.enabled the default scheduler already calls the extender)." -}}
{{- end -}}
{{- if and $s.enabled (eq (int $s.port) (int $s.metricsPort)) -}}
{{- fail (printf "scheduler.port and scheduler.metricsPort are both %d: the extender serves filter, prioritize and bind on one port and /metrics, /healthz and /readyz without client certificates on the other. Set one of them to another port." (int $s.port)) -}}
{{- end -}}
{{- if and $s.tls.certManager.enabled (not $s.tls.enabled) -}}
{{- fail "scheduler.tls.certManager.enabled issues the extender's certificates, but scheduler.tls.enabled is false, so nothing would use them. Set --set scheduler.tls.enabled=true, or leave scheduler.tls.certManager.enabled=false." -}}
{{- end -}}
{{- if and .Values.scheduler.enabled (not .Values.devicePlugin.enabled) (not .Values.devicePlugin.allowWithDRA) (not .Values.scheduler.allowWithoutDevicePlugin) -}}
{{- fail "scheduler.enabled is true and devicePlugin.enabled is false: the scheduler extender needs the device plugin, which serves the allocation the extender writes on each pod. Leave devicePlugin.enabled=true, or set scheduler.allowWithoutDevicePlugin=true if another component runs kube-neuron's device plugin." -}}
{{- end -}}
{{- $catalog := .Values.autoscaler.catalog -}}
{{- if and .Values.autoscaler.enabled $catalog.inline $catalog.configMapName -}}
{{- fail (printf "autoscaler.catalog.inline and autoscaler.catalog.configMapName are both set: the autoscaler reads one catalog file, from the ConfigMap the chart makes of autoscaler.catalog.inline or from your ConfigMap %s. Set only one: --set autoscaler.catalog.configMapName= to use the inline catalog, or --set autoscaler.catalog.inline= to use your ConfigMap." $catalog.configMapName) -}}
{{- end -}}
{{- if and .Values.autoscaler.enabled $catalog.inline -}}
{{- $doc := fromYaml $catalog.inline -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "autoscaler.catalog.inline is not a YAML mapping: %s. It must be an instance catalog file (apiVersion: kube-neuron.io/v1, kind: InstanceCatalog, instanceTypes: [...]; docs/catalog.md), e.g. --set-file autoscaler.catalog.inline=my-catalog.yaml." (get $doc "Error")) -}}
{{- end -}}
{{- if or (ne (toString (get $doc "apiVersion")) "kube-neuron.io/v1") (ne (toString (get $doc "kind")) "InstanceCatalog") -}}
{{- fail (printf "autoscaler.catalog.inline has apiVersion %q and kind %q: an instance catalog file has apiVersion: kube-neuron.io/v1 and kind: InstanceCatalog (docs/catalog.md)." (toString (get $doc "apiVersion")) (toString (get $doc "kind"))) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.autoscaler.enabled (eq .Values.autoscaler.provider "ec2") -}}
{{- $e := .Values.autoscaler.ec2 -}}
{{- $missing := list -}}
{{- $sets := list -}}
{{- if not $e.launchTemplate -}}
{{- $missing = append $missing "autoscaler.ec2.launchTemplate" -}}
{{- $sets = append $sets "--set autoscaler.ec2.launchTemplate=<launch template id lt-... or name>" -}}
{{- end -}}
{{- if not $e.subnets -}}
{{- $missing = append $missing "autoscaler.ec2.subnets" -}}
{{- $sets = append $sets "--set autoscaler.ec2.subnets={subnet-...,subnet-...}" -}}
{{- end -}}
{{- if not $e.clusterName -}}
{{- $missing = append $missing "autoscaler.ec2.clusterName" -}}
{{- $sets = append $sets "--set autoscaler.ec2.clusterName=<cluster name>" -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "autoscaler.provider is ec2 and %s %s empty: the ec2 provider launches Neuron nodes from a launch template into the first of the subnets with capacity, and tags them with the cluster name so that it lists and terminates only this cluster's instances. Set %s (or --set autoscaler.provider=local in the lab)." (join ", " $missing) (ternary "is" "are" (eq (len $missing) 1)) (join " " $sets)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The EKS nodes no node agent runs on (eks.amazonaws.com/compute-type): Fargate and hybrid nodes,
and Auto Mode nodes, which bring AWS's own Neuron device plugin, unless includeEKSAutoModeNodes.
*/}}
{{- define "kube-neuron.eksComputeTypes" -}}
{{- $types := list "fargate" "hybrid" -}}
{{- if not .Values.includeEKSAutoModeNodes -}}{{- $types = append $types "auto" -}}{{- end -}}
{{- toYaml (dict "key" "eks.amazonaws.com/compute-type" "operator" "NotIn" "values" $types) -}}
{{- end -}}

{{/*
The nodeSelectorTerms of the Neuron DaemonSets: a node is a Neuron node when any term matches
(terms are ORed): its Karpenter instance family, its instance type, or the user's own label
(neuronNodes.nodeLabel). Every term also carries the component's own expressions (a list of
matchExpressions, .extra), kube-neuron.eksComputeTypes and neuronNodes.extraMatchExpressions, since expressions are ANDed only
within a term. Takes (dict "root" $ "extra" LIST).
*/}}
{{- define "kube-neuron.neuronNodeTerms" -}}
{{- $v := .root.Values -}}
{{- $common := concat (.extra | default list) (list (include "kube-neuron.eksComputeTypes" .root | fromYaml)) ($v.neuronNodes.extraMatchExpressions | default list) -}}
{{- $terms := list -}}
{{- with $v.neuronNodes.instanceFamilies -}}
{{- $terms = append $terms (prepend $common (dict "key" "karpenter.k8s.aws/instance-family" "operator" "In" "values" .)) -}}
{{- end -}}
{{- with $v.neuronInstances -}}
{{- $terms = append $terms (prepend $common (dict "key" "node.kubernetes.io/instance-type" "operator" "In" "values" .)) -}}
{{- end -}}
{{- with $v.neuronNodes.nodeLabel -}}
{{- if .key -}}
{{- $own := dict "key" .key "operator" "Exists" -}}
{{- if .values -}}
{{- $own = dict "key" .key "operator" "In" "values" .values -}}
{{- end -}}
{{- $terms = append $terms (prepend $common $own) -}}
{{- end -}}
{{- end -}}
{{- range $terms }}
- matchExpressions:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}
