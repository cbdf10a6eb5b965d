{{/* Names and labels shared by every template. */}}

{{- define "cudanalyst.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cudanalyst.operatorName" -}}
{{- printf "%s-operator" (include "cudanalyst.fullname" .) -}}
{{- end -}}

{{- define "cudanalyst.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "cudanalyst.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "cudanalyst.serviceAccountName" -}}
{{- default (include "cudanalyst.operatorName" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "cudanalyst.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces that hold runs (and so runner pods): the watched ones, or the release namespace. */}}
{{- define "cudanalyst.runNamespaces" -}}
{{- if .Values.networkPolicy.namespaces -}}
{{- join "," .Values.networkPolicy.namespaces -}}
{{- else if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Runner pod labels as k=v,... for CUDANALYST_RUNNER_POD_LABELS. */}}
{{- define "cudanalyst.podLabelList" -}}
{{- $pairs := list -}}
{{- range $k, $v := .Values.runner.podLabels -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
