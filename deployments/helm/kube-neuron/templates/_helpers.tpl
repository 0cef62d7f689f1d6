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
The kube-neuron image; the tag defaults to the chart's appVersion.
*/}}
{{- define "kube-neuron.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
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
DRA driver labels.
*/}}
{{- define "kube-neuron.draDriver.labels" -}}
{{ include "kube-neuron.labels" . }}
app.kubernetes.io/name: neuron-dra-driver
app.kubernetes.io/component: dra-driver
{{- end -}}

{{/*
Fails rendering on contradictory values. validate.yaml includes it, so every render runs it.
*/}}
{{- define "kube-neuron.validate" -}}
{{- if and .Values.draDriver.enabled .Values.devicePlugin.enabled (not .Values.devicePlugin.allowWithDRA) -}}
{{- fail "devicePlugin.enabled and draDriver.enabled are both true: a node must run the device plugin or the DRA driver, never both. Set --set devicePlugin.enabled=false (DRA only), or label the DRA nodes kube-neuron.io/allocation-mode=dra and set devicePlugin.allowWithDRA=true to run both on different nodes." -}}
{{- end -}}
{{- if and .Values.scheduler.customScheduler.enabled .Values.scheduler.defaultScheduler.enabled -}}
{{- fail "scheduler.customScheduler.enabled and scheduler.defaultScheduler.enabled are both true: the scheduler extender registers with one scheduler. Set --set scheduler.customScheduler.enabled=false to use the default scheduler, or leave scheduler.defaultScheduler.enabled=false to use the second scheduler my-scheduler." -}}
{{- end -}}
{{- end -}}
