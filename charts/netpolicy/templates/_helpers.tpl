{{- define "netpolicy.labels" -}}
app.kubernetes.io/name: netpolicy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "netpolicy.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "netpolicy.operator" -}}{{ .Release.Name }}-operator{{- end -}}
{{- define "netpolicy.agent" -}}{{ .Release.Name }}-agent{{- end -}}
