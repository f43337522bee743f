{{/* Names: every object is named after the release, so two releases never collide. */}}
{{- define "servingops.name" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- end -}}
{{- define "servingops.worker" -}}{{ include "servingops.name" . }}-worker{{- end -}}
{{- define "servingops.bridge" -}}{{ include "servingops.name" . }}-bridge{{- end -}}
{{- define "servingops.uploads" -}}{{ include "servingops.name" . }}-uploads{{- end -}}
{{- define "servingops.agent" -}}{{ include "servingops.name" . }}-agent{{- end -}}
{{- define "servingops.webhook" -}}{{ include "servingops.name" . }}-webhook{{- end -}}
{{- define "servingops.admission" -}}{{ include "servingops.name" . }}-admission{{- end -}}
{{- define "servingops.config" -}}{{ include "servingops.name" . }}-config{{- end -}}

{{- define "servingops.labels" -}}
app.kubernetes.io/part-of: servingops
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* The image by tag, pinned to a digest when one is given (what `./dev image` writes: the image it built). */}}
{{- define "servingops.image" -}}
{{ required "image.repository: the registry and repository you pushed the servingops image to (./dev image --push REGISTRY/REPOSITORY prints it; docs/image.md)" .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{/* Environment both processes share: where Temporal is, and where traces go. */}}
{{- define "servingops.commonEnv" -}}
- name: TEMPORAL_ADDRESS
  value: {{ .Values.temporal.address | quote }}
- name: TEMPORAL_NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
- name: SERVINGOPS_TASK_QUEUE
  value: {{ .Values.temporal.taskQueue | quote }}
{{- if .Values.temporal.tls.enabled }}
- name: TEMPORAL_TLS_CERT
  value: /etc/servingops/temporal-tls/tls.crt
- name: TEMPORAL_TLS_KEY
  value: /etc/servingops/temporal-tls/tls.key
- name: TEMPORAL_TLS_CA
  value: /etc/servingops/temporal-tls/ca.crt
{{- with .Values.temporal.tls.serverName }}
- name: TEMPORAL_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.otlp.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_EXPORTER_OTLP_INSECURE
  value: {{ $.Values.otlp.insecure | quote }}
{{- end }}
{{- end -}}

{{- define "servingops.temporalTlsVolume" -}}
{{- if .Values.temporal.tls.enabled }}
- name: temporal-tls
  secret:
    secretName: {{ required "temporal.tls.secretName is required when temporal.tls.enabled" .Values.temporal.tls.secretName }}
{{- end }}
{{- end -}}

{{- define "servingops.temporalTlsMount" -}}
{{- if .Values.temporal.tls.enabled }}
- name: temporal-tls
  mountPath: /etc/servingops/temporal-tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "servingops.registrySecret" -}}
{{- if .Values.registry.credentials.create -}}
{{ .Values.registry.credentials.secretName | default (printf "%s-registry" (include "servingops.name" .)) }}
{{- else -}}
{{ .Values.registry.credentials.secretName }}
{{- end -}}
{{- end -}}
{{- define "servingops.catalogEndpoint" -}}{{ include "servingops.name" . }}-catalog-endpoint{{- end -}}
