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
"true" when my-scheduler runs neuron-kube-scheduler (customScheduler.mode plugin), which needs
no extender.
*/}}
{{- define "kube-neuron.myScheduler.plugin" -}}
{{- $c := .Values.scheduler.customScheduler -}}
{{- if and .Values.scheduler.enabled $c.enabled (eq $c.mode "plugin") }}true{{ end -}}
{{- end -}}

{{/*
"true" when the extender runs: scheduler.enabled, unless my-scheduler runs the plugin (the
default-scheduler mode and the extender-only install keep it).
*/}}
{{- define "kube-neuron.scheduler.extender" -}}
{{- if and .Values.scheduler.enabled (not (include "kube-neuron.myScheduler.plugin" .)) }}true{{ end -}}
{{- end -}}

{{/*
"true" when the extender serves HTTPS with client authentication.
*/}}
{{- define "kube-neuron.scheduler.tls" -}}
{{- if and (include "kube-neuron.scheduler.extender" .) .Values.scheduler.tls.enabled }}true{{ end -}}
{{- end -}}

{{/*
"true" when the chart generates the extender's CA and certificates (tls.generate without
cert-manager).
*/}}
{{- define "kube-neuron.scheduler.tlsGenerate" -}}
{{- $t := .Values.scheduler.tls -}}
{{- if and (include "kube-neuron.scheduler.tls" .) $t.generate (not $t.certManager.enabled) }}true{{ end -}}
{{- end -}}

{{/*
The data of the two Secrets the chart generates, as JSON {"server": {...}, "client": {...}},
each with tls.crt, tls.key and ca.crt base64-encoded. Secrets that already exist in the cluster
(helm upgrade reads them with lookup) are kept as they are, so that an upgrade does not replace
the certificates of running pods; when either is missing or incomplete, a new CA signs both
anew. helm template and helm install --dry-run see no cluster and print fresh ones. The result
is kept in .Values for the rest of the render, so that the Secrets and my-scheduler's checksum
agree (each call of genCA makes another CA).
*/}}
{{- define "kube-neuron.scheduler.tlsData" -}}
{{- $t := .Values.scheduler.tls -}}
{{- if not (hasKey $t "_rendered") -}}
{{- $ns := .Values.scheduler.namespace -}}
{{- $keys := list "tls.crt" "tls.key" "ca.crt" -}}
{{- $found := dict -}}
{{- range $role, $name := dict "server" $t.serverSecretName "client" $t.clientSecretName -}}
{{- $data := (lookup "v1" "Secret" $ns $name).data | default dict -}}
{{- $complete := true -}}
{{- range $keys -}}{{- if not (get $data .) -}}{{- $complete = false -}}{{- end -}}{{- end -}}
{{- if $complete -}}{{- $_ := set $found $role (pick $data "tls.crt" "tls.key" "ca.crt") -}}{{- end -}}
{{- end -}}
{{- if not (and (hasKey $found "server") (hasKey $found "client")) -}}
{{- $ca := genCA "k8s-neuron-scheduler-ca" 3650 -}}
{{- $svc := "k8s-neuron-scheduler" -}}
{{- $dns := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- $server := genSignedCert (include "kube-neuron.scheduler.serverName" .) nil $dns 3650 $ca -}}
{{- $client := genSignedCert "my-scheduler" nil nil 3650 $ca -}}
{{- $found = dict
  "server" (dict "tls.crt" ($server.Cert | b64enc) "tls.key" ($server.Key | b64enc) "ca.crt" ($ca.Cert | b64enc))
  "client" (dict "tls.crt" ($client.Cert | b64enc) "tls.key" ($client.Key | b64enc) "ca.crt" ($ca.Cert | b64enc)) -}}
{{- end -}}
{{- $_ := set $t "_rendered" $found -}}
{{- end -}}
{{- toJson (get $t "_rendered") -}}
{{- end -}}

{{/*
my-scheduler's KubeSchedulerConfiguration: in mode extender the extender through its Service;
in mode plugin neuron-kube-scheduler's NeuronTopology plugin (the profile is
lab.PluginSchedulerConfig's, which the chart's tests compare it with). Both elect their leader
on the same Lease, so that the old and the new mode never schedule at once during a switch.
*/}}
{{- define "kube-neuron.myScheduler.config" -}}
{{- $s := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: my-scheduler
{{- if include "kube-neuron.myScheduler.plugin" . }}
    percentageOfNodesToScore: {{ int $s.customScheduler.pluginPercentageOfNodesToScore }}
    plugins:
      multiPoint:
        enabled:
          - name: NeuronTopology
            weight: 10
      postFilter:
        enabled:
          - name: NeuronTopology
          - name: DefaultPreemption
        disabled:
          - name: "*"
      bind:
        enabled:
          - name: NeuronTopology
          - name: DefaultBinder
        disabled:
          - name: "*"
    pluginConfig:
      - name: NeuronTopology
        args:
          policy: {{ $s.policy }}
          candidateNodes: {{ int $s.customScheduler.pluginCandidateNodes }}
{{- else }}
{{- $tls := dict -}}
{{- if include "kube-neuron.scheduler.tls" . -}}
{{- $dir := include "kube-neuron.myScheduler.tlsDir" . -}}
{{- $tls = dict "serverName" (include "kube-neuron.scheduler.serverName" .) "certFile" (printf "%s/tls.crt" $dir) "keyFile" (printf "%s/tls.key" $dir) "caFile" (printf "%s/ca.crt" $dir) -}}
{{- end }}
{{ include "kube-neuron.scheduler.extenders" (dict "urlPrefix" (printf "%s://k8s-neuron-scheduler.%s.svc.cluster.local:%d" (include "kube-neuron.scheduler.scheme" .) $s.namespace (int $s.port)) "weight" $s.extenderWeight "tls" $tls) }}
{{- end }}
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
{{- if eq .Values.scheduler.customScheduler.mode "plugin" -}}
{{- fail "scheduler.customScheduler.mode is plugin and scheduler.defaultScheduler.enabled is true: my-scheduler (neuron-kube-scheduler) and the default scheduler with the extender would both place Neuron pods on the same nodes, each unaware of the devices the other is choosing at that moment. Use one: leave scheduler.defaultScheduler.enabled=false to use my-scheduler with the plugin, or set --set scheduler.customScheduler.enabled=false to register the extender with the default scheduler." -}}
{{- end -}}
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
